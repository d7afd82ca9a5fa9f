// Copyright fencegate authors.
//
// SCRAM-SHA-256 (RFC 5802, RFC 7677), the server's side, as PostgreSQL
// clients speak it: how a client of the PostgreSQL protocol port proves its
// password without sending it. The gateway keeps only verifiers, in
// PostgreSQL's own format (pg_authid.rolpassword):
//
//   SCRAM-SHA-256$<iterations>:<salt base64>$<StoredKey base64>:<ServerKey
//   base64>
//
// Channel binding (SCRAM-SHA-256-PLUS) is not offered; a client that asks
// for it is refused.
//
// The client's side (ScramClient) is how the port signs in to a route's
// PostgreSQL server with the route's password.
//
// Thread safety: ParseScramVerifier and MakeScramVerifier are pure; a
// ScramServer or ScramClient is one exchange, used by one thread.

#ifndef SECURITY_SCRAM_H_
#define SECURITY_SCRAM_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// What the server keeps of a password.
struct ScramVerifier {
  int iterations = 0;
  std::string salt;        // raw bytes
  std::string stored_key;  // H(ClientKey), 32 bytes
  std::string server_key;  // 32 bytes
};

// Parses PostgreSQL's format above. INVALID_ARGUMENT, naming the part that
// is wrong, for anything else (a plain or MD5 password included).
absl::StatusOr<ScramVerifier> ParseScramVerifier(absl::string_view text);

// The verifier of `password` with `salt` and `iterations` (PBKDF2 over
// HMAC-SHA-256), in the format above.
std::string MakeScramVerifier(absl::string_view password,
                              absl::string_view salt, int iterations);

class ScramServer {
 public:
  // `server_nonce`: printable ASCII without ',', fresh for each exchange
  // (at least 18 random bytes, base64-encoded).
  ScramServer(ScramVerifier verifier, std::string server_nonce);

  // The client's first message → the server's first. INVALID_ARGUMENT for
  // a malformed message, an extension the server does not know, or a
  // request for channel binding. Call once.
  absl::StatusOr<std::string> Start(absl::string_view client_first);

  // The client's final message → the server's final (its signature, which
  // proves the server knew the verifier). PERMISSION_DENIED when the proof
  // does not match the verifier: the wrong password. INVALID_ARGUMENT for a
  // malformed message, a nonce or channel-binding header that is not the
  // one of Start(). Call once, after Start() succeeded.
  absl::StatusOr<std::string> Finish(absl::string_view client_final);

 private:
  const ScramVerifier verifier_;
  const std::string server_nonce_;
  std::string gs2_header_;         // "n,," or "y,,"
  std::string client_first_bare_;  // "n=...,r=..."
  std::string server_first_;
  std::string nonce_;  // the client's and the server's
};

class ScramClient {
 public:
  // `client_nonce`: as ScramServer's server_nonce.
  ScramClient(std::string password, std::string client_nonce);
  // The client's first message: "n,,n=,r=<nonce>" (the user is the
  // startup packet's, as PostgreSQL clients send it).
  std::string First();
  // The server's first message → the client's final, with its proof.
  // INVALID_ARGUMENT for a malformed message, a nonce that does not extend
  // the client's, or an iteration count that is not positive. Call once,
  // after First().
  absl::StatusOr<std::string> Final(absl::string_view server_first);
  // The server's final message: PERMISSION_DENIED if its signature does
  // not prove it knew the password (or it reports an error, e=...).
  absl::Status Verify(absl::string_view server_final) const;

 private:
  const std::string password_;
  const std::string client_nonce_;
  std::string auth_message_;
  std::string server_key_;
};

}  // namespace fencegate

#endif  // SECURITY_SCRAM_H_
