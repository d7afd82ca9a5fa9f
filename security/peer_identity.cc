// Copyright fencegate authors.

#include "security/peer_identity.h"

#include <string_view>
#include <vector>

#include "grpc/grpc_security_constants.h"

namespace fencegate {
namespace {

// The CN attributes of `subject`, as gRPC renders it (OpenSSL's RFC 2253
// form, "CN=b,O=x,CN=a": ',' and '+' separate attributes, and one inside a
// value is escaped with '\').
int CommonNames(std::string_view subject) {
  int count = 0;
  bool at_start = true;
  for (size_t i = 0; i < subject.size(); ++i) {
    if (at_start && subject.substr(i, 3) == "CN=") ++count;
    at_start = false;
    if (subject[i] == '\\') {
      ++i;  // The escaped character.
    } else if (subject[i] == ',' || subject[i] == '+') {
      at_start = true;
    }
  }
  return count;
}

}  // namespace

std::string PeerIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return "";
  for (const char* property :
       {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
        GRPC_X509_CN_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> values = auth.FindPropertyValues(property);
    if (values.empty() || values.front().empty()) continue;
    if (property == std::string_view(GRPC_X509_CN_PROPERTY_NAME)) {
      // gRPC reports only the first CN; with several, which one names the
      // caller depends on who reads the certificate: none does.
      std::vector<grpc::string_ref> subject =
          auth.FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
      if (subject.size() != 1 ||
          CommonNames(std::string_view(subject.front().data(),
                                       subject.front().size())) != 1) {
        return "";
      }
    }
    std::string value(values.front().data(), values.front().size());
    // A DNS name or CN never holds ':', a URI always does: a CN (or DNS
    // SAN) spelled like a URI must not pass for one.
    if (property != std::string_view(GRPC_PEER_URI_PROPERTY_NAME) &&
        value.find(':') != std::string::npos) {
      return "";
    }
    return value;
  }
  return "";
}

}  // namespace fencegate
