// Copyright fencegate authors.

#include "security/peer_identity.h"

#include <openssl/asn1.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

// What a certificate says of its subject, as either reader finds it.
struct SubjectNames {
  std::string first_uri;
  std::string first_dns;
  std::string first_cn;
  int cn_count = 0;
};

// The one rule (peer_identity.h).
std::string IdentityOf(const SubjectNames& names) {
  if (!names.first_uri.empty()) return names.first_uri;
  std::string value = names.first_dns;
  if (value.empty()) {
    // With several CNs, which one names the caller depends on who reads the
    // certificate: none does.
    if (names.cn_count != 1) return "";
    value = names.first_cn;
  }
  // A DNS name or CN never holds ':', a URI always does: a CN (or DNS SAN)
  // spelled like a URI must not pass for one.
  if (value.find(':') != std::string::npos) return "";
  return value;
}

std::string FirstValue(const grpc::AuthContext& auth, const char* property) {
  std::vector<grpc::string_ref> values = auth.FindPropertyValues(property);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

std::string Utf8(const ASN1_STRING* text) {
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, text);
  if (n < 0) return "";
  std::string value(reinterpret_cast<const char*>(utf8),
                    static_cast<size_t>(n));
  OPENSSL_free(utf8);
  // An embedded NUL would make the name mean one thing here and another
  // to a C string reader.
  if (value.find('\0') != std::string::npos) return "";
  return value;
}

}  // namespace

std::string PeerIdentity(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return "";
  SubjectNames names;
  names.first_uri = FirstValue(auth, GRPC_PEER_URI_PROPERTY_NAME);
  names.first_dns = FirstValue(auth, GRPC_PEER_DNS_PROPERTY_NAME);
  // gRPC reports only the first CN; the subject tells how many there are.
  names.first_cn = FirstValue(auth, GRPC_X509_CN_PROPERTY_NAME);
  std::vector<grpc::string_ref> subject =
      auth.FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
  if (subject.size() == 1) {
    names.cn_count = CommonNames(
        std::string_view(subject.front().data(), subject.front().size()));
  }
  return IdentityOf(names);
}

std::string CertificateIdentity(const x509_st* cert) {
  if (cert == nullptr) return "";
  SubjectNames names;
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans != nullptr && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
    if (name->type == GEN_URI && names.first_uri.empty()) {
      names.first_uri = Utf8(name->d.uniformResourceIdentifier);
    } else if (name->type == GEN_DNS && names.first_dns.empty()) {
      names.first_dns = Utf8(name->d.dNSName);
    }
  }
  GENERAL_NAMES_free(sans);
  const X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = X509_NAME_get_index_by_NID(subject, NID_commonName, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) {
    if (names.cn_count++ == 0) {
      names.first_cn =
          Utf8(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
    }
  }
  return IdentityOf(names);
}

std::string PeerHost(std::string peer) {
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return peer;
  }
  // gRPC's peer URI, not a host:port of ParseHostPort's: an IPv6 address's
  // brackets come percent-encoded ("ipv6:%5B::1%5D:41234").
  const size_t colon = peer.rfind(':');
  const absl::string_view port = absl::string_view(peer).substr(colon + 1);
  if (colon <= 4 || port.empty() ||
      !std::all_of(port.begin(), port.end(), absl::ascii_isdigit)) {
    return peer;
  }
  peer.resize(colon);
  return peer;
}

std::string CallerOf(const grpc::ServerContextBase& context,
                     const std::string& identity) {
  if (!identity.empty()) return identity;
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
      auth != nullptr) {
    std::string peer_identity = PeerIdentity(*auth);
    if (!peer_identity.empty()) return peer_identity;
  }
  std::string host = PeerHost(context.peer());
  return host.empty() ? std::string("unknown") : host;
}

}  // namespace fencegate
