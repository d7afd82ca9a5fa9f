// Copyright fencegate authors.

#include "gateway/route_fences.h"

#include <algorithm>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fencegate/common/stale_token.h"

namespace fencegate {
namespace {

// Times Next() asks the arbiter again when another route holds more.
constexpr int kNextAttempts = 4;

// `status` with "route "NAME": " before its message, payloads kept.
absl::Status OnRoute(const absl::Status& status, const std::string& route) {
  absl::Status named(status.code(),
                     absl::StrCat("route \"", route, "\": ", status.message()));
  status.ForEachPayload(
      [&named](absl::string_view url, const absl::Cord& payload) {
        named.SetPayload(url, payload);
      });
  return named;
}

}  // namespace

RouteFences::RouteFences(const Router& router) {
  for (const auto& [name, adapter] : router.Adapters()) {
    if (adapter->KeepsFences()) routes_.emplace_back(name, adapter);
  }
}

absl::Status RouteFences::Raise(absl::string_view domain, uint64_t token) {
  for (const auto& [name, adapter] : routes_) {
    if (absl::Status s = adapter->RaiseFence(domain, token); !s.ok()) {
      return OnRoute(s, name);
    }
  }
  return absl::OkStatus();
}

absl::Status RouteFences::CheckToken(uint64_t token) const {
  for (const auto& [name, adapter] : routes_) {
    if (token > adapter->MaxFenceToken()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", token, " is above ", adapter->MaxFenceToken(),
          ", the highest route \"", name, "\" can hold: no fence was moved"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> RouteFences::Read(absl::string_view domain) {
  uint64_t highest = 0;
  for (const auto& [name, adapter] : routes_) {
    absl::StatusOr<uint64_t> token = adapter->ReadFence(domain);
    if (!token.ok()) return OnRoute(token.status(), name);
    highest = std::max(highest, *token);
  }
  return highest;
}

absl::StatusOr<uint64_t> RouteFences::Next(absl::string_view domain,
                                           uint64_t at_least) {
  if (routes_.empty()) return at_least;
  uint64_t want = at_least;
  for (int attempt = 0; attempt < kNextAttempts; ++attempt) {
    const auto& [arbiter, first] = routes_.front();
    absl::StatusOr<uint64_t> next = first->NextFence(domain, want);
    if (!next.ok()) return OnRoute(next.status(), arbiter);
    bool held_higher = false;
    for (size_t i = 1; i < routes_.size() && !held_higher; ++i) {
      absl::Status s = routes_[i].second->RaiseFence(domain, *next);
      std::optional<StaleTokenInfo> stale = GetStaleToken(s);
      if (stale.has_value() && stale->highest_token > *next &&
          stale->highest_token < UINT64_MAX) {
        want = stale->highest_token + 1;
        held_higher = true;
      } else if (!s.ok()) {
        return OnRoute(s, routes_[i].first);
      }
    }
    if (!held_higher) return *next;
  }
  return absl::AbortedError(absl::StrCat(
      "domain \"", absl::CHexEscape(domain),
      "\": the routes' fences kept moving while a token was taken; retry"));
}

absl::StatusOr<std::vector<RouteFences::Line>> RouteFences::Recover(
    FenceStore& store, Clock& clock) {
  std::vector<Line> lines;
  for (const auto& [name, adapter] : routes_) {
    size_t held = 0, missing = 0, older = 0;
    std::string example;
    absl::Status error;
    absl::Status read =
        adapter->ReadFences([&](absl::string_view domain, uint64_t token) {
          ++held;
          if (!error.ok()) return;
          absl::StatusOr<FenceState> mine = store.Get(domain);
          if (!mine.ok()) {
            error = mine.status();
            return;
          }
          if (mine->highest_token >= token) return;
          ++(mine->highest_token == 0 ? missing : older);
          if (example.empty()) {
            example =
                absl::StrFormat("\"%s\" %d -> %d", absl::CHexEscape(domain),
                                mine->highest_token, token);
          }
          if (absl::StatusOr<FenceState> raised =
                  store.Raise(domain, token, clock.Now());
              !raised.ok()) {
            error = raised.status();
          }
        });
    if (read.ok()) read = error;
    if (read.code() == absl::StatusCode::kUnavailable) {
      lines.push_back(
          Line{true,
               absl::StrCat("route \"", name,
                            "\": fences not read at start-up (", read.message(),
                            "); its storage still refuses stale writes, and "
                            "lease grants and Fence calls reach it")});
      continue;
    }
    if (!read.ok()) return OnRoute(read, name);
    if (missing + older == 0) {
      lines.push_back(Line{
          false, absl::StrCat("route \"", name, "\": ", held,
                              " fences in its storage, none above the fence "
                              "store's")});
    } else {
      lines.push_back(Line{
          true, absl::StrCat(
                    "route \"", name, "\": ", held, " fences in its storage; ",
                    missing, " missing from the fence store and ", older,
                    " lower in it (lost, or restored from an older copy?) were "
                    "raised to the storage's, e.g. ",
                    example)});
    }
  }
  return lines;
}

}  // namespace fencegate
