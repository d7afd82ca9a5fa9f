// Copyright fencegate authors.

#include "security/request_gate.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/stale_token.h"
#include "fencegate/common/token_refused.h"
#include "observability/log.h"
#include "security/peer_identity.h"

namespace fencegate {
namespace {

using Rule = v1::Policy::Rule;

constexpr char kWrite[] = "/fencegate.v1.Gateway/Write";
constexpr char kFence[] = "/fencegate.v1.Gateway/Fence";
constexpr char kGetFence[] = "/fencegate.v1.Gateway/GetFence";
constexpr char kSequence[] = "/fencegate.v1.Gateway/Sequence";
constexpr char kAcquire[] = "/fencegate.v1.Lease/Acquire";
constexpr char kKeepAlive[] = "/fencegate.v1.Lease/KeepAlive";
constexpr char kRelease[] = "/fencegate.v1.Lease/Release";

}  // namespace

std::optional<Permission> PermissionOf(absl::string_view method) {
  static const auto* const kTable =
      new absl::flat_hash_map<absl::string_view, Permission>{
          {kWrite, Rule::WRITE},        {kFence, Rule::FENCE},
          {kGetFence, Rule::GET_FENCE}, {kSequence, Rule::FENCE},
          {kAcquire, Rule::LEASE},      {kKeepAlive, Rule::LEASE},
          {kRelease, Rule::LEASE},      {kPgTransactionMethod, Rule::WRITE},
      };
  auto it = kTable->find(method);
  if (it == kTable->end()) return std::nullopt;
  return it->second;
}

CallFacts CallFactsOf(const v1::WriteRequest& request) {
  CallFacts facts;
  facts.method = kWrite;
  facts.domain =
      request.domain().empty() ? request.resource() : request.domain();
  facts.token = request.token();
  facts.resource = request.resource();
  facts.request_id = request.request_id();
  for (const v1::Operation& op : request.ops()) {
    if (op.has_sql() && op.sql().has_statement() && !op.sql().has_sql()) {
      facts.statements.push_back(op.sql().statement());
    } else {
      facts.ad_hoc = true;
      facts.sql_text |= op.has_sql();
    }
  }
  return facts;
}

CallFacts CallFactsOf(const v1::FenceRequest& request) {
  CallFacts facts;
  facts.method = kFence;
  facts.domain = request.domain();
  facts.token = request.token();
  facts.request_id = request.request_id();
  return facts;
}

CallFacts PgTransactionFacts(absl::string_view domain, uint64_t token,
                             absl::string_view resource) {
  CallFacts facts;
  facts.method = kPgTransactionMethod;
  facts.domain = domain;
  facts.token = token;
  facts.resource = resource;
  facts.ad_hoc = true;
  facts.sql_text = true;
  return facts;
}

namespace {

// A call that names only a domain (or a lock).
CallFacts DomainFacts(absl::string_view method, absl::string_view domain) {
  CallFacts facts;
  facts.method = method;
  facts.domain = domain;
  return facts;
}

}  // namespace

CallFacts CallFactsOf(const v1::GetFenceRequest& request) {
  return DomainFacts(kGetFence, request.domain());
}

CallFacts CallFactsOf(const v1::SequenceRequest& request) {
  CallFacts facts = DomainFacts(kSequence, request.domain());
  facts.request_id = request.request_id();
  return facts;
}

CallFacts CallFactsOf(const v1::AcquireRequest& request) {
  return DomainFacts(kAcquire, request.name());
}

CallFacts CallFactsOf(const v1::KeepAliveRequest& request) {
  return DomainFacts(kKeepAlive, request.name());
}

CallFacts CallFactsOf(const v1::ReleaseRequest& request) {
  return DomainFacts(kRelease, request.name());
}

RequestGate::RequestGate(RequestGateOptions options)
    : options_(std::move(options)) {}

void RequestGate::SetPolicy(std::shared_ptr<const Policy> policy) {
  absl::MutexLock lock(&mu_);
  policy_ = std::move(policy);
}

bool RequestGate::has_policy() const { return policy() != nullptr; }

std::shared_ptr<const Policy> RequestGate::policy() const {
  absl::MutexLock lock(&mu_);
  return policy_;
}

absl::StatusOr<std::unique_ptr<Admission>> RequestGate::Admit(
    const grpc::ServerContextBase& context, const CallFacts& facts) const {
  std::shared_ptr<const Policy> policy = this->policy();
  std::string identity;
  // Without a policy or an audit log nobody reads the identity: spare the
  // write path the auth context.
  if (policy != nullptr || options_.audit != nullptr) {
    if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
        auth != nullptr) {
      identity = PeerIdentity(*auth);
    }
  }
  return AdmitAs(std::move(policy), std::move(identity), facts);
}

absl::StatusOr<std::unique_ptr<Admission>> RequestGate::AdmitIdentity(
    std::string identity, const CallFacts& facts) const {
  return AdmitAs(policy(), std::move(identity), facts);
}

absl::StatusOr<std::unique_ptr<Admission>> RequestGate::AdmitAs(
    std::shared_ptr<const Policy> policy, std::string identity,
    const CallFacts& facts) const {
  std::unique_ptr<Admission> admission(new Admission());
  admission->gate_ = this;
  admission->facts_ = facts;
  admission->identity_ = std::move(identity);
  if (policy == nullptr) return admission;

  auto deny = [&](absl::Status status) {
    Log(LogSeverity::kWarning,
        absl::StrCat(facts.method, " denied: ", status.message()));
    Record(admission->identity_, facts, "denied", facts.token,
           status.message());
    return status;
  };
  if (admission->identity_.empty()) {
    return deny(absl::UnauthenticatedError(
        "no client identity: a certificate with a URI SAN, DNS SAN or CN is "
        "required"));
  }
  std::optional<Permission> permission = PermissionOf(facts.method);
  if (!permission.has_value()) {
    return deny(absl::PermissionDeniedError(absl::StrCat(
        "identity \"", absl::CHexEscape(admission->identity_),
        "\" may not call ", facts.method, ": the method has no permission")));
  }
  admission->binding_ = policy->BindingOf(facts.domain);
  if (absl::string_view watched = WatcherKindOf(admission->binding_.source);
      *permission == Rule::LEASE && !watched.empty()) {
    // A grant raises the fence by itself, unchecked: it would put a token
    // the lock service never granted above its holder's.
    return deny(absl::PermissionDeniedError(absl::StrCat(
        "lock \"", absl::CHexEscape(facts.domain), "\" takes its tokens from ",
        watched, "; the lease service does not grant it")));
  }
  if (*permission == Rule::FENCE &&  // Fence and Sequence.
      admission->binding_.source == v1::Policy::Domain::LEASE) {
    // The lease service's grants raise such a fence; only an operator
    // overrides them.
    permission = Rule::ADMIN;
    admission->admin_ = true;
  }
  PolicyRequest request;
  request.identity = admission->identity_;
  request.permission = *permission;
  request.domain = facts.domain;
  request.resource = facts.resource;
  request.ad_hoc = facts.ad_hoc;
  request.statements = facts.statements;
  request.sql_text = facts.sql_text;
  if (absl::Status s = policy->Authorize(request); !s.ok()) {
    return deny(std::move(s));
  }
  if (admission->binding_.source == v1::Policy::Domain::LEASE &&
      (*permission == Rule::WRITE ||
       (*permission == Rule::LEASE && facts.method != kRelease)) &&
      options_.lease_servable) {
    // Each gateway's lease service keeps its own locks: a gateway that
    // shares its storage with others serves none (a Release still ends a
    // lease it granted).
    if (absl::Status servable = options_.lease_servable(); !servable.ok()) {
      return deny(absl::Status(
          servable.code(),
          absl::StrCat("lock \"", absl::CHexEscape(facts.domain),
                       "\" is bound to LEASE: ", servable.message())));
    }
  }
  return admission;
}

void RequestGate::AuditInternalAdvance(absl::string_view source,
                                       absl::string_view domain,
                                       uint64_t token) const {
  CallFacts facts;
  facts.domain = domain;
  Record(source, facts, "fence_advanced", token, "");
}

void RequestGate::Record(absl::string_view identity, const CallFacts& facts,
                         absl::string_view outcome, uint64_t token,
                         absl::string_view reason) const {
  if (options_.audit == nullptr) return;
  v1::AuditRecord record;
  record.set_identity(std::string(identity));
  record.set_rpc(std::string(facts.method));
  record.set_domain(std::string(facts.domain));
  record.set_token(token);
  record.set_resource(std::string(facts.resource));
  record.set_outcome(std::string(outcome));
  record.set_request_id(std::string(facts.request_id));
  record.set_reason(std::string(reason));
  options_.audit->Record(std::move(record));
}

const AdvanceCheck* Admission::advance_check() const {
  const bool leased = binding_.source == v1::Policy::Domain::LEASE && !admin_;
  if (!leased && WatcherKindOf(binding_.source).empty() &&
      binding_.max_advance == 0) {
    return nullptr;
  }
  return this;
}

std::optional<absl::Status> Admission::Check(const FenceState& current,
                                             uint64_t token,
                                             bool may_block) const {
  const absl::string_view domain = facts_.domain;
  const uint64_t highest = current.highest_token;
  if (binding_.max_advance != 0 &&
      current.advanced_at != absl::InfinitePast() &&
      token - highest > binding_.max_advance) {
    const uint64_t limit = highest > UINT64_MAX - binding_.max_advance
                               ? UINT64_MAX
                               : highest + binding_.max_advance;
    return TokenRefusedError(domain, token, highest,
                             v1::TokenRefused::ABOVE_MAX_ADVANCE, limit);
  }
  switch (binding_.source) {
    case v1::Policy::Domain::LEASE:
      if (admin_) break;
      // Grants raise the fence to their token before the holder hears of
      // it: a token above the fence was never granted.
      return TokenRefusedError(domain, token, highest,
                               v1::TokenRefused::NOT_GRANTED_BY_LEASE, highest);
    case v1::Policy::Domain::ETCD:
    case v1::Policy::Domain::ZOOKEEPER:
      // The watcher raises the fence to each new holder's token, so a
      // holder's writes are rarely advances; the few that are (a write that
      // beat the watcher) are worth a question to the lock service.
      if (!may_block) return std::nullopt;
      return CheckHolder(current, token);
    default:
      break;
  }
  return absl::OkStatus();
}

absl::Status Admission::CheckHolder(const FenceState& current,
                                    uint64_t token) const {
  const absl::string_view domain = facts_.domain;
  const absl::string_view kind = WatcherKindOf(binding_.source);
  const bool etcd = binding_.source == v1::Policy::Domain::ETCD;
  auto it = gate_->options_.watchers.find(kind);
  if (it == gate_->options_.watchers.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("domain \"", absl::CHexEscape(domain), "\" is bound to ",
                     kind, ", but the gateway follows no ", kind));
  }
  absl::StatusOr<LockHolder> holder = it->second->HolderOf(std::string(domain));
  if (!holder.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot check token ", token,
                                               " against ", kind, ": ",
                                               holder.status().message()));
  }
  if (token > holder->newest) {
    return TokenRefusedError(domain, token, current.highest_token,
                             etcd ? v1::TokenRefused::ABOVE_ETCD_REVISION
                                  : v1::TokenRefused::ABOVE_ZOOKEEPER_ZXID,
                             holder->newest);
  }
  if (token != holder->token) {
    return TokenRefusedError(domain, token, current.highest_token,
                             etcd ? v1::TokenRefused::NOT_ETCD_HOLDER
                                  : v1::TokenRefused::NOT_ZOOKEEPER_HOLDER,
                             holder->token);
  }
  return absl::OkStatus();
}

void Admission::Audit(const absl::StatusOr<FenceDecision>& decision) const {
  if (decision.ok()) {
    if (decision->advanced) AuditAdvance(decision->fence.highest_token);
    return;
  }
  if (std::optional<uint64_t> advanced =
          Fencer::AdvancedBeforeError(decision.status());
      advanced.has_value()) {
    AuditAdvance(*advanced);  // The write failed, but the fence moved.
    return;
  }
  if (std::optional<v1::TokenRefused> refused =
          GetTokenRefused(decision.status());
      refused.has_value()) {
    Log(LogSeverity::kWarning,
        absl::StrCat(facts_.method, " identity=\"", absl::CHexEscape(identity_),
                     "\": ", decision.status().message()));
    gate_->Record(identity_, facts_, "token_refused", refused->token(),
                  decision.status().message());
  }
}

void Admission::AuditAdvance(uint64_t token) const {
  gate_->Record(identity_, facts_, "fence_advanced", token, "");
}

}  // namespace fencegate
