// Copyright fencegate authors.

#include "security/scram.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fencegate {
namespace {

constexpr absl::string_view kPrefix = "SCRAM-SHA-256$";
constexpr size_t kKeyBytes = SHA256_DIGEST_LENGTH;

std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

// SaltedPassword := Hi(password, salt, i) (RFC 5802), PBKDF2 with
// HMAC-SHA-256. The caller wipes it when done.
std::string SaltedPassword(absl::string_view password, absl::string_view salt,
                           int iterations) {
  std::string salted(kKeyBytes, '\0');
  PKCS5_PBKDF2_HMAC(password.data(), static_cast<int>(password.size()),
                    reinterpret_cast<const unsigned char*>(salt.data()),
                    static_cast<int>(salt.size()), iterations, EVP_sha256(),
                    kKeyBytes, reinterpret_cast<unsigned char*>(salted.data()));
  return salted;
}

std::string Sha256(absl::string_view data) {
  unsigned char out[kKeyBytes];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out);
  return std::string(reinterpret_cast<const char*>(out), kKeyBytes);
}

absl::Status Malformed(absl::string_view what, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed SCRAM ", what, ": ", why));
}

// The base64 value of `part`, which must read "<key>=<value>".
absl::StatusOr<std::string> Attribute(absl::string_view part, char key,
                                      absl::string_view what) {
  if (part.size() < 2 || part[0] != key || part[1] != '=') {
    return Malformed(what, absl::StrCat("expected the attribute '",
                                        absl::string_view(&key, 1), "='"));
  }
  return std::string(part.substr(2));
}

}  // namespace

absl::StatusOr<ScramVerifier> ParseScramVerifier(absl::string_view text) {
  if (!absl::StartsWith(text, kPrefix)) {
    return absl::InvalidArgumentError(
        "not a SCRAM-SHA-256 verifier (it does not start with "
        "\"SCRAM-SHA-256$\"; plain and MD5 passwords are not accepted)");
  }
  std::vector<absl::string_view> parts =
      absl::StrSplit(text.substr(kPrefix.size()), '$');
  if (parts.size() != 2) {
    return Malformed("verifier", "expected <iterations>:<salt>$<keys>");
  }
  std::vector<absl::string_view> params = absl::StrSplit(parts[0], ':');
  std::vector<absl::string_view> keys = absl::StrSplit(parts[1], ':');
  ScramVerifier v;
  if (params.size() != 2 || !absl::SimpleAtoi(params[0], &v.iterations) ||
      v.iterations < 1) {
    return Malformed("verifier", "expected a positive iteration count");
  }
  if (!absl::Base64Unescape(params[1], &v.salt) || v.salt.empty()) {
    return Malformed("verifier", "its salt is not base64");
  }
  if (keys.size() != 2 || !absl::Base64Unescape(keys[0], &v.stored_key) ||
      !absl::Base64Unescape(keys[1], &v.server_key) ||
      v.stored_key.size() != kKeyBytes || v.server_key.size() != kKeyBytes) {
    return Malformed("verifier",
                     "expected <StoredKey>:<ServerKey>, 32 bytes each in "
                     "base64");
  }
  return v;
}

std::string MakeScramVerifier(absl::string_view password,
                              absl::string_view salt, int iterations) {
  std::string salted_password = SaltedPassword(password, salt, iterations);
  const std::string stored = Sha256(Hmac(salted_password, "Client Key"));
  const std::string server = Hmac(salted_password, "Server Key");
  OPENSSL_cleanse(salted_password.data(), salted_password.size());
  return absl::StrCat(kPrefix, iterations, ":", absl::Base64Escape(salt), "$",
                      absl::Base64Escape(stored), ":",
                      absl::Base64Escape(server));
}

ScramServer::ScramServer(ScramVerifier verifier, std::string server_nonce)
    : verifier_(std::move(verifier)), server_nonce_(std::move(server_nonce)) {}

absl::StatusOr<std::string> ScramServer::Start(absl::string_view client_first) {
  constexpr absl::string_view kWhat = "client-first-message";
  // gs2-header: a channel-binding flag, an optional authzid, then the bare
  // message.
  std::vector<absl::string_view> parts =
      absl::StrSplit(client_first, absl::MaxSplits(',', 2));
  if (parts.size() != 3) return Malformed(kWhat, "too few parts");
  if (parts[0] != "n" && parts[0] != "y") {
    return absl::StartsWith(parts[0], "p=")
               ? Malformed(kWhat,
                           "channel binding is not offered (use "
                           "SCRAM-SHA-256, not SCRAM-SHA-256-PLUS)")
               : Malformed(kWhat, "unknown channel-binding flag");
  }
  if (!parts[1].empty()) {
    return Malformed(kWhat, "an authorization identity is not accepted");
  }
  gs2_header_ = absl::StrCat(parts[0], ",,");
  client_first_bare_ = std::string(parts[2]);
  // n=<user> (PostgreSQL clients send it empty: the user is the startup
  // packet's), then r=<nonce>; no extensions.
  std::vector<absl::string_view> bare = absl::StrSplit(parts[2], ',');
  if (bare.size() != 2 || !absl::StartsWith(bare[0], "n=")) {
    return Malformed(kWhat, "expected n=<user>,r=<nonce> and nothing more");
  }
  absl::StatusOr<std::string> client_nonce = Attribute(bare[1], 'r', kWhat);
  if (!client_nonce.ok()) return client_nonce.status();
  if (client_nonce->empty()) return Malformed(kWhat, "empty nonce");
  nonce_ = absl::StrCat(*client_nonce, server_nonce_);
  server_first_ =
      absl::StrCat("r=", nonce_, ",s=", absl::Base64Escape(verifier_.salt),
                   ",i=", verifier_.iterations);
  return server_first_;
}

absl::StatusOr<std::string> ScramServer::Finish(
    absl::string_view client_final) {
  constexpr absl::string_view kWhat = "client-final-message";
  if (server_first_.empty()) {
    return absl::FailedPreconditionError("SCRAM exchange was not started");
  }
  const size_t proof_at = client_final.rfind(",p=");
  if (proof_at == absl::string_view::npos) {
    return Malformed(kWhat, "no proof (p=)");
  }
  const absl::string_view without_proof = client_final.substr(0, proof_at);
  std::vector<absl::string_view> parts = absl::StrSplit(without_proof, ',');
  if (parts.size() != 2) {
    return Malformed(kWhat, "expected c=<binding>,r=<nonce>,p=<proof>");
  }
  absl::StatusOr<std::string> binding = Attribute(parts[0], 'c', kWhat);
  if (!binding.ok()) return binding.status();
  if (*binding != absl::Base64Escape(gs2_header_)) {
    return Malformed(kWhat, "its channel-binding header is not the first's");
  }
  absl::StatusOr<std::string> nonce = Attribute(parts[1], 'r', kWhat);
  if (!nonce.ok()) return nonce.status();
  if (*nonce != nonce_)
    return Malformed(kWhat, "its nonce is not the server's");
  std::string proof;
  if (!absl::Base64Unescape(client_final.substr(proof_at + 3), &proof) ||
      proof.size() != kKeyBytes) {
    return Malformed(kWhat, "its proof is not 32 bytes in base64");
  }
  const std::string auth_message =
      absl::StrCat(client_first_bare_, ",", server_first_, ",", without_proof);
  const std::string signature = Hmac(verifier_.stored_key, auth_message);
  std::string client_key(kKeyBytes, '\0');
  for (size_t i = 0; i < kKeyBytes; ++i)
    client_key[i] = proof[i] ^ signature[i];
  const std::string stored = Sha256(client_key);
  if (CRYPTO_memcmp(stored.data(), verifier_.stored_key.data(), kKeyBytes) !=
      0) {
    return absl::PermissionDeniedError(
        "password authentication failed: the SCRAM proof does not match");
  }
  return absl::StrCat(
      "v=", absl::Base64Escape(Hmac(verifier_.server_key, auth_message)));
}

ScramClient::ScramClient(std::string password, std::string client_nonce)
    : password_(std::move(password)), client_nonce_(std::move(client_nonce)) {}

std::string ScramClient::First() {
  return absl::StrCat("n,,n=,r=", client_nonce_);
}

absl::StatusOr<std::string> ScramClient::Final(absl::string_view server_first) {
  constexpr absl::string_view kWhat = "server-first-message";
  std::vector<absl::string_view> parts = absl::StrSplit(server_first, ',');
  if (parts.size() != 3) {
    return Malformed(kWhat, "expected r=<nonce>,s=<salt>,i=<iterations>");
  }
  absl::StatusOr<std::string> nonce = Attribute(parts[0], 'r', kWhat);
  if (!nonce.ok()) return nonce.status();
  if (!absl::StartsWith(*nonce, client_nonce_) ||
      nonce->size() == client_nonce_.size()) {
    return Malformed(kWhat, "its nonce does not extend the client's");
  }
  absl::StatusOr<std::string> salt64 = Attribute(parts[1], 's', kWhat);
  if (!salt64.ok()) return salt64.status();
  std::string salt;
  if (!absl::Base64Unescape(*salt64, &salt) || salt.empty()) {
    return Malformed(kWhat, "its salt is not base64");
  }
  absl::StatusOr<std::string> count = Attribute(parts[2], 'i', kWhat);
  if (!count.ok()) return count.status();
  int iterations = 0;
  if (!absl::SimpleAtoi(*count, &iterations) || iterations < 1) {
    return Malformed(kWhat, "its iteration count is not positive");
  }
  std::string salted_password = SaltedPassword(password_, salt, iterations);
  const std::string client_key = Hmac(salted_password, "Client Key");
  server_key_ = Hmac(salted_password, "Server Key");
  OPENSSL_cleanse(salted_password.data(), salted_password.size());
  const std::string without_proof =
      absl::StrCat("c=", absl::Base64Escape("n,,"), ",r=", *nonce);
  auth_message_ = absl::StrCat("n=,r=", client_nonce_, ",", server_first, ",",
                               without_proof);
  const std::string signature = Hmac(Sha256(client_key), auth_message_);
  std::string proof(kKeyBytes, '\0');
  for (size_t i = 0; i < kKeyBytes; ++i)
    proof[i] = client_key[i] ^ signature[i];
  return absl::StrCat(without_proof, ",p=", absl::Base64Escape(proof));
}

absl::Status ScramClient::Verify(absl::string_view server_final) const {
  if (absl::StartsWith(server_final, "e=")) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the server refused the SCRAM proof: ", server_final.substr(2)));
  }
  const std::string expected =
      absl::StrCat("v=", absl::Base64Escape(Hmac(server_key_, auth_message_)));
  if (server_key_.empty() || server_final != expected) {
    return absl::PermissionDeniedError(
        "the server's SCRAM signature does not prove it knows the password");
  }
  return absl::OkStatus();
}

}  // namespace fencegate
