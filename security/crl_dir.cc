// Copyright fencegate authors.

#include "security/crl_dir.h"

#include <openssl/asn1.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fencegate {
namespace {

using File = std::unique_ptr<FILE, int (*)(FILE*)>;

File Open(const std::string& path) {
  return File(std::fopen(path.c_str(), "r"), &std::fclose);
}

// The subject hash OpenSSL names files by, as 8 hex digits.
std::optional<std::string> HashOf(const X509_NAME* name) {
  int ok = 0;
  const unsigned long hash = X509_NAME_hash_ex(name, nullptr, nullptr, &ok);
  if (!ok) return std::nullopt;
  return absl::StrFormat("%08lx", hash);
}

std::string OneLine(const X509_NAME* name) {
  char text[256] = {};
  if (X509_NAME_oneline(name, text, sizeof(text)) == nullptr) return "?";
  return text;
}

// For "<8 hex digits>.<rest>": the rest; nullopt for any other name.
std::optional<std::string_view> HashSuffix(std::string_view name) {
  if (name.size() < 10 || name[8] != '.') return std::nullopt;
  for (char c : name.substr(0, 8)) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) ||
        absl::ascii_isupper(static_cast<unsigned char>(c))) {
      return std::nullopt;
    }
  }
  return name.substr(9);
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The CRL file `path`, named <hash>.r<N>, holds a CRL of issuer <hash> that
// has not expired.
absl::Status CheckCrlFile(const std::filesystem::path& path,
                          std::string_view hash, absl::Time now) {
  File in = Open(path.string());
  std::unique_ptr<X509_CRL, void (*)(X509_CRL*)> crl(
      in == nullptr ? nullptr
                    : PEM_read_X509_CRL(in.get(), nullptr, nullptr, nullptr),
      &X509_CRL_free);
  ERR_clear_error();
  if (crl == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.crl_dir: ", path.string(),
                     " is not a PEM certificate "
                     "revocation list"));
  }
  const std::optional<std::string> issuer_hash =
      HashOf(X509_CRL_get_issuer(crl.get()));
  if (!issuer_hash.has_value() || *issuer_hash != hash) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.crl_dir: ", path.string(), " is the CRL of \"",
        OneLine(X509_CRL_get_issuer(crl.get())), "\", whose subject hash is ",
        issuer_hash.value_or("?"),
        ": OpenSSL looks for it under that name (`openssl rehash`)"));
  }
  const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl.get());
  time_t at = absl::ToTimeT(now);
  if (next != nullptr && X509_cmp_time(next, &at) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls.crl_dir: ", path.string(), " (CRL of \"",
        OneLine(X509_CRL_get_issuer(crl.get())),
        "\") has expired: OpenSSL would refuse every certificate that CA "
        "signed; publish a new one under the next suffix"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckCrlDir(const std::string& dir, const std::string& client_ca,
                         absl::Time now) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.crl_dir: ", dir, " is not a directory"));
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const std::optional<std::string_view> suffix = HashSuffix(name);
    if (!suffix.has_value()) continue;  // Not a name OpenSSL looks up.
    if (AllDigits(*suffix)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tls.crl_dir: ", entry.path().string(),
          " is named like a certificate link: OpenSSL would trust a "
          "certificate there as a client CA beside tls.client_ca; keep only "
          "CRLs (<hash>.r<N>) in the directory"));
    }
    if ((*suffix)[0] == 'r' && AllDigits(suffix->substr(1))) {
      if (absl::Status s = CheckCrlFile(
              entry.path(), std::string_view(name).substr(0, 8), now);
          !s.ok()) {
        return s;
      }
    }
  }
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.crl_dir: cannot list ", dir, ": ", error.message()));
  }
  File in = Open(client_ca);
  if (in == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.client_ca: cannot read ", client_ca));
  }
  int cas = 0;
  while (true) {
    std::unique_ptr<X509, void (*)(X509*)> ca(
        PEM_read_X509_AUX(in.get(), nullptr, nullptr, nullptr), &X509_free);
    if (ca == nullptr) break;
    ++cas;
    const X509_NAME* subject = X509_get_subject_name(ca.get());
    const std::optional<std::string> hash = HashOf(subject);
    const std::string crl = absl::StrCat(dir, "/", hash.value_or("?"), ".r0");
    if (!hash.has_value() || !std::filesystem::exists(crl, error)) {
      ERR_clear_error();
      return absl::InvalidArgumentError(absl::StrCat(
          "tls.crl_dir: no CRL for client CA \"", OneLine(subject),
          "\" (expected ", crl,
          "; `openssl rehash` names them): its certificates would never be "
          "checked for revocation"));
    }
  }
  ERR_clear_error();  // The end of the bundle reads as an error.
  if (cas == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls.client_ca: no certificate in ", client_ca));
  }
  return absl::OkStatus();
}

}  // namespace fencegate
