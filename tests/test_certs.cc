// Copyright fencegate authors.

#include "tests/test_certs.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/fixtures.h"

namespace fencegate::testing {
namespace {

// Runs openssl with `args`; its standard output goes to `out` if given.
absl::Status Openssl(const std::vector<std::string>& args,
                     std::string* out = nullptr) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string stdout_text, err;
  if (RunCommand(argv, &stdout_text, &err) != 0) {
    return absl::InternalError(absl::StrCat("openssl ", args[0], ": ", err));
  }
  if (out != nullptr) *out = std::move(stdout_text);
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
  return IssueSubject(
      file, absl::StrCat("/CN=", absl::StrReplaceAll(cn, {{"/", "\\/"}})), san,
      days);
}

absl::StatusOr<CertFiles> TestPki::IssueSubject(const std::string& file,
                                                const std::string& subject,
                                                const std::string& san,
                                                int days) const {
  const std::string base = absl::StrCat(dir_, "/", file);
  const std::string tmp = absl::StrCat(base, ".new");
  if (absl::Status s =
          Openssl({"req", "-newkey", "ec", "-pkeyopt",
                   "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp + ".key",
                   "-out", tmp + ".csr", "-subj", subject});
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

absl::StatusOr<std::unique_ptr<TestPki>> TestPki::IssueCa(
    const std::string& name, int days) const {
  const std::string base = absl::StrCat(dir_, "/", name);
  if (absl::Status s = Openssl({"req", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                                base + ".key", "-out", base + ".csr", "-subj",
                                absl::StrCat("/CN=", name)});
      !s.ok()) {
    return s;
  }
  WriteFileOrDie(base + ".ext",
                 "basicConstraints=critical,CA:TRUE\n"
                 "keyUsage=critical,keyCertSign,cRLSign\n");
  if (absl::Status s =
          Openssl({"x509", "-req", "-in", base + ".csr", "-CA", ca_.cert,
                   "-CAkey", ca_.key, "-CAcreateserial", "-out", base + ".pem",
                   "-days", absl::StrCat(days), "-extfile", base + ".ext"});
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<TestPki>(
      new TestPki(dir_, CertFiles{base + ".pem", base + ".key"}));
}

absl::StatusOr<CertFiles> TestPki::Chain(
    const std::string& file, const CertFiles& leaf,
    const std::vector<std::string>& issuers) const {
  absl::StatusOr<std::string> text = ReadFile(leaf.cert);
  if (!text.ok()) return text.status();
  std::string chain = *std::move(text);
  for (const std::string& issuer : issuers) {
    absl::StatusOr<std::string> pem = ReadFile(issuer);
    if (!pem.ok()) return pem.status();
    absl::StrAppend(&chain, *pem);
  }
  CertFiles files{absl::StrCat(dir_, "/", file, ".pem"), leaf.key};
  WriteFileOrDie(files.cert, chain);
  return files;
}

absl::StatusOr<std::string> TestPki::WriteCrl(
    const std::vector<std::string>& revoked, const std::string& crl_dir,
    int suffix, bool expired) const {
  // `openssl ca` keeps what it revoked in a database: a fresh one per CRL.
  const std::string work = absl::StrCat(dir_, "/crl-work");
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  const std::string config = work + "/ca.cnf";
  WriteFileOrDie(config, absl::StrCat("[ca]\ndefault_ca = d\n[d]\ndatabase = ",
                                      work, "/index.txt\ncrlnumber = ", work,
                                      "/crlnumber\ndefault_md = sha256\n"
                                      "default_crl_days = 30\n"));
  WriteFileOrDie(work + "/index.txt", "");
  WriteFileOrDie(work + "/crlnumber", absl::StrCat(suffix + 1, "0\n"));
  const std::vector<std::string> ca_args = {"-config", config,  "-keyfile",
                                            ca_.key,   "-cert", ca_.cert};
  for (const std::string& cert : revoked) {
    std::vector<std::string> args = {"ca"};
    args.insert(args.end(), ca_args.begin(), ca_args.end());
    args.insert(args.end(), {"-revoke", cert});
    if (absl::Status s = Openssl(args); !s.ok()) return s;
  }
  std::vector<std::string> args = {"ca"};
  args.insert(args.end(), ca_args.begin(), ca_args.end());
  // OpenSSL prefers the CRL issued last, to the second: one per suffix,
  // an hour ago plus a minute per suffix, so that a newer one always wins.
  const absl::Time now = absl::Now();
  auto stamp = [](absl::Time t) {
    return absl::FormatTime("%Y%m%d%H%M%SZ", t, absl::UTCTimeZone());
  };
  const absl::Time last_update = now -
                                 (expired ? absl::Hours(48) : absl::Hours(1)) +
                                 absl::Minutes(suffix);
  args.insert(args.end(), {"-gencrl", "-crl_lastupdate", stamp(last_update),
                           "-out", work + "/crl.pem"});
  if (expired) {
    args.insert(args.end(), {"-crl_nextupdate", stamp(now - absl::Hours(24))});
  }
  if (absl::Status s = Openssl(args); !s.ok()) return s;
  std::string hash;
  if (absl::Status s =
          Openssl({"x509", "-subject_hash", "-noout", "-in", ca_.cert}, &hash);
      !s.ok()) {
    return s;
  }
  const std::string path = absl::StrCat(
      crl_dir, "/", absl::StripAsciiWhitespace(hash), ".r", suffix);
  std::error_code error;
  std::filesystem::rename(work + "/crl.pem", path, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot rename the CRL to ", path, ": ", error.message()));
  }
  return path;
}

}  // namespace fencegate::testing
