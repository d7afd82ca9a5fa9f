// Copyright fencegate authors.
//
// RequestGate: the one place every RPC of the Gateway and Lease services
// passes, right after its request is parsed and before it takes its
// domain's lane or touches a fence. It establishes the caller's identity
// (peer_identity.h), authorizes the request against the policy in force
// (policy.h), and hands back an Admission that carries the policy's token
// rules for the domain (an AdvanceCheck for the Fencer) and audits the
// outcome. Each RPC's facts come from its request through CallFactsOf(),
// whose table names every method's permission; a method missing from it is
// denied.
//
// Without a policy every request is admitted and no token rule applies (as
// for loopback development); denials and advances are still audited.

#ifndef SECURITY_REQUEST_GATE_H_
#define SECURITY_REQUEST_GATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/v1/gateway.pb.h"
#include "fencegate/v1/lease.pb.h"
#include "fencing/advance_check.h"
#include "fencing/fencer.h"
#include "grpcpp/server_context.h"
#include "security/audit_log.h"
#include "security/policy.h"
#include "token_watchers/token_watcher.h"

namespace fencegate {

// What the gate needs of one request. Views into the request, which must
// outlive every use of the Admission (its destruction reads none of them).
struct CallFacts {
  // Full method name, e.g. "/fencegate.v1.Gateway/Write".
  absl::string_view method;
  // The domain (the lock's name for Lease calls).
  absl::string_view domain;
  uint64_t token = 0;
  // Write only.
  absl::string_view resource;
  bool ad_hoc = false;
  std::vector<absl::string_view> statements;
  bool sql_text = false;
  absl::string_view request_id;
};

// The "method" of a transaction of the PostgreSQL port's sessions
// (pgport/): it needs WRITE on the session's domain with "<route>/" as the
// resource (what every resource of the route starts with), and ad hoc SQL.
inline constexpr char kPgTransactionMethod[] = "/fencegate.pg/Transaction";

// The facts of a transaction of a PostgreSQL port session.
// `resource`: "<route>/".
CallFacts PgTransactionFacts(absl::string_view domain, uint64_t token,
                             absl::string_view resource);

// The permission a method needs, from the one table; nullopt for a method
// not in it.
std::optional<Permission> PermissionOf(absl::string_view method);

// The facts of each request type. For a Write, `domain` is the request's
// domain, or its resource when that is empty.
CallFacts CallFactsOf(const v1::WriteRequest& request);
CallFacts CallFactsOf(const v1::FenceRequest& request);
CallFacts CallFactsOf(const v1::GetFenceRequest& request);
CallFacts CallFactsOf(const v1::SequenceRequest& request);
CallFacts CallFactsOf(const v1::AcquireRequest& request);
CallFacts CallFactsOf(const v1::KeepAliveRequest& request);
CallFacts CallFactsOf(const v1::ReleaseRequest& request);

struct RequestGateOptions {
  // Where denials, refused tokens and advances are recorded; may be null.
  AuditLog* audit = nullptr;
  // The lock services the gateway follows, by kind ("etcd", "zookeeper";
  // see WatcherKindOf): an advance on a domain bound to ETCD or ZOOKEEPER
  // asks its watcher who holds the lock (HolderOf, which blocks). Not
  // owned; each must stay alive while requests are admitted.
  absl::flat_hash_map<std::string, TokenWatcher*> watchers;
  // Whether this gateway may serve domains bound to LEASE now: an error
  // (FleetWatch::LeaseServable, gateway/fleet_watch.h) refuses their
  // grants, keep-alives and writes with it. Must not block. Null: always.
  std::function<absl::Status()> lease_servable;
};

class RequestGate;

// One admitted request. Thread safety: used by one request at a time.
class Admission final : public AdvanceCheck {
 public:
  const std::string& identity() const { return identity_; }

  // The Fencer's check for this request's token, or null if no token rule
  // applies (no policy, or a domain bound to nothing and without
  // max_advance).
  const AdvanceCheck* advance_check() const;

  // Audits the fencing outcome: a refused token, or an advance.
  void Audit(const absl::StatusOr<FenceDecision>& decision) const;
  // Audits an advance to `token` this request made another way (a grant).
  void AuditAdvance(uint64_t token) const;

  // AdvanceCheck: the domain's binding (policy.proto, Domain).
  std::optional<absl::Status> Check(const FenceState& current, uint64_t token,
                                    bool may_block) const override;

 private:
  friend class RequestGate;
  Admission() = default;
  // For a domain bound to a lock service: `token` must be its holder's.
  absl::Status CheckHolder(const FenceState& current, uint64_t token) const;

  const RequestGate* gate_ = nullptr;
  std::string identity_;
  CallFacts facts_;
  DomainBinding binding_;
  // May advance a domain bound to LEASE (Fence with ADMIN).
  bool admin_ = false;
};

// Thread safe.
class RequestGate {
 public:
  explicit RequestGate(RequestGateOptions options);

  // Puts `policy` in force for requests admitted from now on; null removes
  // the policy.
  void SetPolicy(std::shared_ptr<const Policy> policy);
  bool has_policy() const;

  // Admits the request, or returns the error to answer it with, having
  // logged and audited it: PERMISSION_DENIED naming the identity, the
  // permission and the domain (and resource), or saying that the lease
  // service cannot grant a domain bound to etcd or ZooKeeper; UNAUTHENTICATED
  // for a caller without an identity while a policy is in force. Never blocks.
  absl::StatusOr<std::unique_ptr<Admission>> Admit(
      const grpc::ServerContextBase& context, const CallFacts& facts) const;
  // Admit() of a caller whose `identity` another port established (the
  // PostgreSQL port's, from its client certificate; empty for none).
  absl::StatusOr<std::unique_ptr<Admission>> AdmitIdentity(
      std::string identity, const CallFacts& facts) const;

  // Audits an advance the gateway made by itself, with `source` as the
  // identity (e.g. "etcd-watcher").
  void AuditInternalAdvance(absl::string_view source, absl::string_view domain,
                            uint64_t token) const;

 private:
  friend class Admission;
  std::shared_ptr<const Policy> policy() const;
  // Admit() once the identity is known (or not needed).
  absl::StatusOr<std::unique_ptr<Admission>> AdmitAs(
      std::shared_ptr<const Policy> policy, std::string identity,
      const CallFacts& facts) const;
  void Record(absl::string_view identity, const CallFacts& facts,
              absl::string_view outcome, uint64_t token,
              absl::string_view reason) const;

  const RequestGateOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Policy> policy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate

#endif  // SECURITY_REQUEST_GATE_H_
