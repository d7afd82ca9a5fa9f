// Copyright fencegate authors.

#include "gateway/peer_identity.h"

#include <string_view>
#include <vector>

#include "grpc/grpc_security_constants.h"

namespace fencegate {

std::string PeerIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return "";
  for (const char* property :
       {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
        GRPC_X509_CN_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> values = auth.FindPropertyValues(property);
    if (values.empty() || values.front().empty()) continue;
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
