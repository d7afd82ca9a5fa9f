// Copyright fencegate authors.

#include "security/policy.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fencegate/common/text_proto.h"

namespace fencegate {
namespace {

using Rule = v1::Policy::Rule;

bool IdentityMatches(absl::string_view pattern, absl::string_view identity) {
  if (absl::EndsWith(pattern, "*")) {
    return absl::StartsWith(identity, pattern.substr(0, pattern.size() - 1));
  }
  return pattern == identity;
}

bool AnyPrefix(const google::protobuf::RepeatedPtrField<std::string>& prefixes,
               absl::string_view value) {
  for (const std::string& p : prefixes) {
    if (absl::StartsWith(value, p)) return true;
  }
  return false;
}

bool Grants(const Rule& rule, Permission wanted) {
  for (int p : rule.permissions()) {
    if (p == wanted) return true;
    // ADMIN may Fence any domain.
    if (wanted == Rule::FENCE && p == Rule::ADMIN) return true;
  }
  return false;
}

}  // namespace

absl::string_view WatcherKindOf(TokenSourceKind source) {
  switch (source) {
    case v1::Policy::Domain::ETCD:
      return "etcd";
    case v1::Policy::Domain::ZOOKEEPER:
      return "zookeeper";
    default:
      return "";
  }
}

absl::StatusOr<std::shared_ptr<const Policy>> Policy::Load(
    const std::string& path, const PolicyEnvironment& env) {
  v1::Policy proto;
  if (absl::Status s = LoadTextProtoFile(path, "policy", &proto); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::shared_ptr<const Policy>> policy =
      Create(std::move(proto), env);
  if (!policy.ok()) {
    return absl::Status(
        policy.status().code(),
        absl::StrCat("policy \"", path, "\": ", policy.status().message()));
  }
  return policy;
}

absl::StatusOr<std::shared_ptr<const Policy>> Policy::Create(
    v1::Policy proto, const PolicyEnvironment& env) {
  for (int i = 0; i < proto.rule_size(); ++i) {
    const Rule& rule = proto.rule(i);
    auto bad = [i](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("rule ", i + 1, ": ", why));
    };
    if (rule.identities().empty()) return bad("identities: at least one");
    for (const std::string& id : rule.identities()) {
      if (id.empty()) return bad("identities: an identity is not empty");
      if (id.find('*') != id.size() - 1 && id.find('*') != std::string::npos) {
        return bad(absl::StrCat("identities: \"", absl::CHexEscape(id),
                                "\": '*' may only end a pattern"));
      }
    }
    if (rule.permissions().empty()) return bad("permissions: at least one");
    bool writes = false;
    for (int p : rule.permissions()) {
      if (p == Rule::PERMISSION_UNSPECIFIED) {
        return bad("permissions: PERMISSION_UNSPECIFIED is not a permission");
      }
      writes |= p == Rule::WRITE;
    }
    if (rule.domain_prefixes().empty()) {
      return bad("domain_prefixes: at least one (\"\" matches every domain)");
    }
    if (writes && rule.resource_prefixes().empty()) {
      return bad(
          "resource_prefixes: at least one with WRITE (\"\" matches every "
          "resource)");
    }
    if (!writes && !rule.resource_prefixes().empty()) {
      return bad("resource_prefixes: only apply to WRITE");
    }
    if (!writes && !rule.sql_statements().empty()) {
      return bad("sql_statements: only apply to WRITE");
    }
    for (const std::string& name : rule.sql_statements()) {
      if (!env.statement_names.contains(name)) {
        return bad(absl::StrCat("sql_statements: \"", absl::CHexEscape(name),
                                "\" is declared on no route"));
      }
    }
  }
  for (int i = 0; i < proto.domain_size(); ++i) {
    const v1::Policy::Domain& d = proto.domain(i);
    for (int j = 0; j < i; ++j) {
      if (proto.domain(j).prefix() == d.prefix()) {
        return absl::InvalidArgumentError(
            absl::StrCat("domain ", i + 1, ": prefix \"",
                         absl::CHexEscape(d.prefix()), "\" bound twice"));
      }
    }
    if (absl::string_view kind = WatcherKindOf(d.token_source());
        !kind.empty() && !env.watched.contains(kind)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "domain ", i + 1, ": prefix \"", absl::CHexEscape(d.prefix()),
          "\" is bound to ",
          v1::Policy::Domain::TokenSource_Name(d.token_source()),
          ", but the gateway follows no ", kind, " (--", kind, "_endpoint)"));
    }
  }
  return std::shared_ptr<const Policy>(new Policy(std::move(proto)));
}

bool Policy::RuleAllows(const Rule& rule, const PolicyRequest& request) const {
  bool identity = false;
  for (const std::string& id : rule.identities()) {
    if (IdentityMatches(id, request.identity)) identity = true;
  }
  if (!identity || !Grants(rule, request.permission) ||
      !AnyPrefix(rule.domain_prefixes(), request.domain)) {
    return false;
  }
  if (request.permission != Rule::WRITE) return true;
  if (!AnyPrefix(rule.resource_prefixes(), request.resource)) return false;
  if (rule.sql_statements().empty()) return true;
  // Named statements only.
  if (request.ad_hoc) return false;
  for (absl::string_view name : request.statements) {
    bool listed = false;
    for (const std::string& allowed : rule.sql_statements()) {
      if (allowed == name) listed = true;
    }
    if (!listed) return false;
  }
  return true;
}

absl::Status Policy::Authorize(const PolicyRequest& request) const {
  for (const Rule& rule : proto_.rule()) {
    if (RuleAllows(rule, request)) return absl::OkStatus();
  }
  std::string what =
      absl::StrCat("identity \"", absl::CHexEscape(request.identity),
                   "\" may not ", Rule::Permission_Name(request.permission),
                   " domain \"", absl::CHexEscape(request.domain), "\"");
  if (request.permission == Rule::WRITE) {
    absl::StrAppend(&what, " resource \"", absl::CHexEscape(request.resource),
                    "\"");
    if (request.sql_text) {
      absl::StrAppend(&what, " with SQL text");
    } else if (!request.ad_hoc && !request.statements.empty()) {
      absl::StrAppend(
          &what, " with statements \"",
          absl::StrJoin(request.statements, "\", \"",
                        [](std::string* out, absl::string_view name) {
                          out->append(absl::CHexEscape(name));
                        }),
          "\"");
    }
  }
  return absl::PermissionDeniedError(what);
}

DomainBinding Policy::BindingOf(absl::string_view domain) const {
  const v1::Policy::Domain* best = nullptr;
  for (const v1::Policy::Domain& d : proto_.domain()) {
    if (absl::StartsWith(domain, d.prefix()) &&
        (best == nullptr || d.prefix().size() > best->prefix().size())) {
      best = &d;
    }
  }
  if (best == nullptr) return DomainBinding{};
  return DomainBinding{best->token_source(), best->max_advance()};
}

}  // namespace fencegate
