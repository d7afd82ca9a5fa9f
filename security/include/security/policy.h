// Copyright fencegate authors.
//
// Policy: the gateway's access policy (proto/fencegate/v1/policy.proto),
// parsed and validated once, then immutable. It answers two questions: may
// this identity do this to this domain and resource (Authorize), and which
// lock service's tokens does a domain accept (BindingOf). Everything no rule
// allows is denied. docs/security.md explains the rules with an example.

#ifndef SECURITY_POLICY_H_
#define SECURITY_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fencegate/v1/policy.pb.h"

namespace fencegate {

using Permission = v1::Policy::Rule::Permission;
using TokenSourceKind = v1::Policy::Domain::TokenSource;

// What the policy is checked against when it is loaded.
struct PolicyEnvironment {
  // The lock services the gateway follows ("etcd", "zookeeper"; see
  // token_watchers/): a domain bound to ETCD or ZOOKEEPER needs its own.
  absl::flat_hash_set<std::string> watched;
  // Every statement name declared on any route: a rule may only name these.
  absl::flat_hash_set<std::string> statement_names;
};

// One request, as the policy sees it.
struct PolicyRequest {
  absl::string_view identity;
  Permission permission = v1::Policy::Rule::PERMISSION_UNSPECIFIED;
  // The domain, or the lock's name for LEASE.
  absl::string_view domain;
  // WRITE only: the resource, and what the Write runs: `ad_hoc` if any
  // operation is SQL text or a file operation, and the names of the
  // statements it calls.
  absl::string_view resource;
  bool ad_hoc = false;
  std::vector<absl::string_view> statements;
  // Whether any operation is SQL text (for the denial's message only).
  bool sql_text = false;
};

struct DomainBinding {
  TokenSourceKind source = v1::Policy::Domain::ANY;
  // 0: no limit.
  uint64_t max_advance = 0;
};

// The token watcher kind ("etcd", "zookeeper") that checks the tokens of a
// domain bound to `source`; empty for ANY and LEASE.
absl::string_view WatcherKindOf(TokenSourceKind source);

// Immutable; safe for concurrent use.
class Policy {
 public:
  // Reads a text-format policy file. INVALID_ARGUMENT naming the file and
  // the line, or the rule and field that fails validation.
  static absl::StatusOr<std::shared_ptr<const Policy>> Load(
      const std::string& path, const PolicyEnvironment& env);
  // Validates a parsed policy; errors as Load().
  static absl::StatusOr<std::shared_ptr<const Policy>> Create(
      v1::Policy proto, const PolicyEnvironment& env);

  // OK if one rule allows all of `request`; else PERMISSION_DENIED naming
  // the identity, the permission and the domain (and resource), never the
  // rules. FENCE is allowed by a rule with FENCE or ADMIN.
  absl::Status Authorize(const PolicyRequest& request) const;

  // The binding of the longest `domain` prefix that matches; ANY, no limit,
  // if none does.
  DomainBinding BindingOf(absl::string_view domain) const;

  size_t rule_count() const { return proto_.rule_size(); }

 private:
  explicit Policy(v1::Policy proto) : proto_(std::move(proto)) {}
  bool RuleAllows(const v1::Policy::Rule& rule,
                  const PolicyRequest& request) const;

  const v1::Policy proto_;
};

}  // namespace fencegate

#endif  // SECURITY_POLICY_H_
