// Copyright fencegate authors.
//
// Fuzzes the policy text: the text-format parse, Policy::Create (every
// rule's and domain's validation), and then Authorize and BindingOf with
// requests made from the policy's own strings. Checks, beyond "no crash, no
// UB, no leak": a policy without rules allows nothing, and Authorize is
// deterministic.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "fencegate/common/text_proto.h"
#include "security/policy.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  fencegate::v1::Policy proto;
  if (!fencegate::ParseTextProto(text, "policy", &proto).ok()) return 0;
  fencegate::PolicyEnvironment env;
  env.watched = {"etcd"};
  env.statement_names = {"complete_job"};
  const bool has_rules = proto.rule_size() > 0;
  // Strings to build requests from: the policy's own, and one of none.
  std::vector<std::string> ids = {"spiffe://example.org/w"};
  std::vector<std::string> domains = {"jobs/a", ""};
  for (const auto& rule : proto.rule()) {
    for (const auto& id : rule.identities()) ids.push_back(id);
    for (const auto& d : rule.domain_prefixes()) domains.push_back(d + "x");
  }
  absl::StatusOr<std::shared_ptr<const fencegate::Policy>> policy =
      fencegate::Policy::Create(std::move(proto), env);
  if (!policy.ok()) return 0;
  for (size_t i = 0; i < ids.size() && i < 8; ++i) {
    for (size_t j = 0; j < domains.size() && j < 8; ++j) {
      for (int p = 1; p <= 5; ++p) {
        fencegate::PolicyRequest request;
        request.identity = ids[i];
        request.permission = static_cast<fencegate::Permission>(p);
        request.domain = domains[j];
        request.resource = "db/t";
        const absl::Status s = (*policy)->Authorize(request);
        FG_FUZZ_CHECK(s.code() == (*policy)->Authorize(request).code());
        if (!has_rules) FG_FUZZ_CHECK(!s.ok());
        if (!s.ok()) FG_FUZZ_CHECK(absl::IsPermissionDenied(s));
        (void)(*policy)->BindingOf(domains[j]);
      }
    }
  }
  return 0;
}
