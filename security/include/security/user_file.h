// Copyright fencegate authors.
//
// The users who may sign in to the PostgreSQL protocol port with a password,
// each with the SCRAM-SHA-256 verifier of it (scram.h). The file's format
// is pgbouncer's auth_file, with verifiers only:
//
//   "worker" "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"
//
// one user a line, each field in double quotes (a quote inside one is
// written twice); blank lines and lines starting with ';' or '#' are
// skipped. A verifier is what PostgreSQL keeps in pg_authid.rolpassword, so
// a role's can be copied from the database.
//
// Thread safety: immutable once loaded; safe for concurrent use.

#ifndef SECURITY_USER_FILE_H_
#define SECURITY_USER_FILE_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "security/scram.h"

namespace fencegate {

class UserFile {
 public:
  // Parses `text`; `source` names it in errors. INVALID_ARGUMENT naming the
  // line for: a line that is not two quoted fields, an empty or repeated
  // user, a password that is not a SCRAM-SHA-256 verifier (plain and MD5
  // passwords are refused: the file would hold what signs in).
  static absl::StatusOr<UserFile> Parse(absl::string_view text,
                                        absl::string_view source);
  // Parse() of the file at `path`; NOT_FOUND or PERMISSION_DENIED if it
  // cannot be read.
  static absl::StatusOr<UserFile> Load(const std::string& path);

  // The verifier of `user`, or nullptr if the file does not name them.
  const ScramVerifier* Find(absl::string_view user) const;

  size_t size() const { return users_.size(); }

 private:
  absl::flat_hash_map<std::string, ScramVerifier> users_;
};

}  // namespace fencegate

#endif  // SECURITY_USER_FILE_H_
