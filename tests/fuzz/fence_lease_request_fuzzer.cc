// Copyright fencegate authors.
//
// Fuzzes Fence, Sequence and Lease (Acquire, KeepAlive, Release) request
// bytes through the gateway's checks and then the real Fencer and
// LeaseManager over a RocksDB fence store. One input is a list of calls,
// each a FuzzedDataProvider string: a kind byte, then the bytes of its
// request message (make_seeds.py writes such inputs). Checks, beyond "no
// crash, no UB, no leak":
//   - a Fence accepted by CheckFenceCall either moves the fence to at least
//     its token or is refused stale, never lowering it;
//   - Sequence never returns a token at or below the fence before it;
//   - every lease grant's token is above the domain's fence before it.
// The store lives across inputs, but each input's names get a prefix of
// their own (its number), so every input starts from fresh domains and a
// crash reproduces from its input alone.

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/v1/gateway.pb.h"
#include "fencegate/v1/lease.pb.h"
#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "fencing/lease_manager.h"
#include "fencing/rocksdb_fence_store.h"
#include "gateway/write_request.h"
#include "security/request_gate.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate {
namespace {

struct World {
  std::unique_ptr<RocksDbStore> store;
  std::unique_ptr<Fencer> fencer;
  std::unique_ptr<LeaseManager> leases;
};

World& TheWorld() {
  static World* world = [] {
    auto* w = new World;
    RocksDbFenceStoreOptions options;
    options.path = fuzz::ScratchDir("fence") + "/fence";
    auto store = OpenRocksDbStore(options);
    fuzz::CheckOk(store.status(), "fence store");
    w->store = *std::move(store);
    w->fencer = std::make_unique<Fencer>(w->store.get(), Clock::Real());
    auto leases =
        LeaseManager::Create(w->store.get(), w->fencer.get(), Clock::Real());
    fuzz::CheckOk(leases.status(), "lease manager");
    w->leases = *std::move(leases);
    return w;
  }();
  return *world;
}

uint64_t FenceOf(absl::string_view domain) {
  absl::StatusOr<FenceState> state = TheWorld().fencer->Get(domain);
  FG_FUZZ_CHECK(state.ok());
  return state->highest_token;
}

void OnFence(const v1::FenceRequest& request) {
  const CallFacts facts = CallFactsOf(request);
  if (!CheckFenceCall(facts.domain, facts.token, /*has_token=*/true,
                      facts.request_id)
           .ok()) {
    return;
  }
  const uint64_t before = FenceOf(request.domain());
  absl::StatusOr<FenceDecision> d =
      TheWorld().fencer->Fence(request.domain(), request.token());
  const uint64_t after = FenceOf(request.domain());
  FG_FUZZ_CHECK(after >= before);
  if (d.ok()) {
    FG_FUZZ_CHECK(after >= request.token());
  } else {
    FG_FUZZ_CHECK(GetStaleToken(d.status()).has_value() &&
                  request.token() < before);
  }
}

void OnSequence(const v1::SequenceRequest& request) {
  const CallFacts facts = CallFactsOf(request);
  if (!CheckFenceCall(facts.domain, 0, /*has_token=*/false, facts.request_id)
           .ok()) {
    return;
  }
  const uint64_t before = FenceOf(request.domain());
  absl::StatusOr<FenceDecision> d =
      TheWorld().fencer->Sequence(request.domain());
  if (d.ok()) FG_FUZZ_CHECK(d->fence.highest_token > before);
}

void OnAcquire(const v1::AcquireRequest& request, std::string* lease_id) {
  const bool valid_name = CheckFenceCall(request.name(), 0, false, "").ok();
  const uint64_t before = valid_name ? FenceOf(request.name()) : 0;
  absl::Notification done;
  absl::StatusOr<AcquireOutcome> outcome;
  // wait 0: a held lock answers at once, so the fuzzer never blocks.
  TheWorld().leases->Acquire(
      request.name(), request.owner(), /*caller=*/"fuzzer",
      absl::Milliseconds(request.ttl_ms()), absl::ZeroDuration(), nullptr,
      [&](absl::StatusOr<AcquireOutcome> o) {
        outcome = std::move(o);
        done.Notify();
      });
  done.WaitForNotification();
  if (!valid_name) FG_FUZZ_CHECK(!outcome.ok());
  if (outcome.ok() && outcome->acquired) {
    FG_FUZZ_CHECK(outcome->lease.token > before);
    FG_FUZZ_CHECK(!outcome->lease.lease_id.empty());
    *lease_id = outcome->lease.lease_id;
  }
}

}  // namespace
}  // namespace fencegate

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate;  // NOLINT
  FuzzedDataProvider in(data, size);
  std::string lease_id;  // The last grant's, so KeepAlive and Release can hit.
  static uint64_t inputs = 0;
  const std::string prefix = absl::StrCat(++inputs, "/");
  for (int calls = 0; calls < 16 && in.remaining_bytes() > 0; ++calls) {
    // One call: its kind byte, then its message's bytes.
    const std::string chunk = in.ConsumeRandomLengthString();
    if (chunk.empty()) continue;
    const uint8_t kind = static_cast<uint8_t>(chunk[0]) % 5;
    const std::string bytes = chunk.substr(1);
    switch (kind) {
      case 0: {
        v1::FenceRequest r;
        if (!r.ParseFromString(bytes)) break;
        r.set_domain(prefix + r.domain());
        OnFence(r);
        break;
      }
      case 1: {
        v1::SequenceRequest r;
        if (!r.ParseFromString(bytes)) break;
        r.set_domain(prefix + r.domain());
        OnSequence(r);
        break;
      }
      case 2: {
        v1::AcquireRequest r;
        if (!r.ParseFromString(bytes)) break;
        r.set_name(prefix + r.name());
        OnAcquire(r, &lease_id);
        break;
      }
      case 3:
      case 4: {
        // KeepAlive and Release carry the same fields: name and lease_id.
        v1::KeepAliveRequest r;
        if (!r.ParseFromString(bytes)) break;
        r.set_name(prefix + r.name());
        if (r.lease_id() == "last") r.set_lease_id(lease_id);
        if (kind == 3) {
          (void)TheWorld().leases->KeepAlive(r.name(), r.lease_id());
        } else {
          (void)TheWorld().leases->Release(r.name(), r.lease_id());
        }
        break;
      }
    }
  }
  return 0;
}
