// Copyright fencegate authors.

#include "gateway/peer_identity.h"

#include <vector>

#include "grpc/grpc_security_constants.h"

namespace fencegate {

std::string PeerIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return "";
  for (const char* property :
       {GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
        GRPC_X509_CN_PROPERTY_NAME}) {
    std::vector<grpc::string_ref> values = auth.FindPropertyValues(property);
    if (!values.empty() && !values.front().empty()) {
      return std::string(values.front().data(), values.front().size());
    }
  }
  return "";
}

}  // namespace fencegate
