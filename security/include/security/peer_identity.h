// Copyright fencegate authors.
//
// The caller's identity, from the client certificate gRPC verified (mTLS):
// its first URI SAN (e.g. a SPIFFE ID), else its first DNS SAN, else its
// subject CN when the subject has exactly one. Empty for a caller without a
// certificate, for a subject with several CNs and no SAN, and when the DNS
// SAN or CN it would be holds a ':' (so that it cannot pass for a URI).

#ifndef SECURITY_PEER_IDENTITY_H_
#define SECURITY_PEER_IDENTITY_H_

#include <string>

#include "grpcpp/security/auth_context.h"

namespace fencegate {

std::string PeerIdentity(const grpc::AuthContext& auth);

}  // namespace fencegate

#endif  // SECURITY_PEER_IDENTITY_H_
