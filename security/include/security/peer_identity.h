// Copyright fencegate authors.
//
// The caller's identity, from the client certificate the TLS handshake
// verified (mTLS): its first URI SAN (e.g. a SPIFFE ID), else its first DNS
// SAN, else its subject CN when the subject has exactly one. Empty for a
// caller without a certificate, for a subject with several CNs and no SAN,
// and when the DNS SAN or CN it would be holds a ':' (so that it cannot
// pass for a URI). The gRPC port reads the certificate from gRPC's auth
// context, the PostgreSQL port from OpenSSL: one rule, two readers.

#ifndef SECURITY_PEER_IDENTITY_H_
#define SECURITY_PEER_IDENTITY_H_

#include <string>

#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"

// OpenSSL's certificate, kept opaque here.
struct x509_st;

namespace fencegate {

// From gRPC's view of a verified peer.
std::string PeerIdentity(const grpc::AuthContext& auth);

// From a certificate OpenSSL verified; empty for null.
std::string CertificateIdentity(const x509_st* cert);

// Who a call comes from, for sharing what callers share: `identity` if
// not empty, else the peer's identity (PeerIdentity), else its address as
// gRPC names it without the port ("ipv4:10.0.0.1", "ipv6:[::1]"; a Unix
// socket's peer as it is). Identities and addresses cannot collide: an
// identity holds no ':' unless it is a URI, and gRPC's address names have
// no "//". Never empty.
std::string CallerOf(const grpc::ServerContextBase& context,
                     const std::string& identity);

// `peer` (ServerContext::peer()) without its port, if it has one.
std::string PeerHost(std::string peer);

}  // namespace fencegate

#endif  // SECURITY_PEER_IDENTITY_H_
