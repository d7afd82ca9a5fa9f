// Copyright fencegate authors.

#include "tests/test_certs.h"

#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/fixtures.h"

namespace fencegate::testing {
namespace {

absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out, err;
  if (RunCommand(argv, &out, &err) != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[0], ": ", err));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestPki>> TestPki::Create(
    const std::string& dir, const std::string& name) {
  CertFiles ca{absl::StrCat(dir, "/", name, ".pem"),
               absl::StrCat(dir, "/", name, ".key")};
  if (absl::Status s = Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                                ca.key, "-out", ca.cert, "-days", "30", "-subj",
                                absl::StrCat("/CN=", name)});
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<TestPki>(new TestPki(dir, std::move(ca)));
}

absl::StatusOr<CertFiles> TestPki::Issue(const std::string& file,
                                         const std::string& cn,
                                         const std::string& san,
                                         int days) const {
  const std::string base = absl::StrCat(dir_, "/", file);
  const std::string tmp = absl::StrCat(base, ".new");
  if (absl::Status s = Openssl(
          {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
           "-nodes", "-keyout", tmp + ".key", "-out", tmp + ".csr", "-subj",
           absl::StrCat("/CN=", absl::StrReplaceAll(cn, {{"/", "\\/"}}))});
      !s.ok()) {
    return s;
  }
  std::vector<std::string> sign = {"x509",
                                   "-req",
                                   "-in",
                                   tmp + ".csr",
                                   "-CA",
                                   ca_.cert,
                                   "-CAkey",
                                   ca_.key,
                                   "-CAcreateserial",
                                   "-out",
                                   tmp + ".pem",
                                   "-days",
                                   absl::StrCat(days)};
  if (!san.empty()) {
    WriteFileOrDie(tmp + ".ext", absl::StrCat("subjectAltName=", san, "\n"));
    sign.push_back("-extfile");
    sign.push_back(tmp + ".ext");
  }
  if (absl::Status s = Openssl(sign); !s.ok()) return s;
  CertFiles files{base + ".pem", base + ".key"};
  // Key first: a watcher that reads between the renames sees a new key with
  // the old certificate for a moment, which the next read corrects.
  if (std::rename((tmp + ".key").c_str(), files.key.c_str()) != 0 ||
      std::rename((tmp + ".pem").c_str(), files.cert.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  }
  return files;
}

}  // namespace fencegate::testing
