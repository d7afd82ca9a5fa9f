// Copyright fencegate authors.

#include "security/chain_revocation.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "observability/log.h"

namespace fencegate {
namespace {

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

struct CertsFree {
  void operator()(STACK_OF(X509) * certs) const {
    sk_X509_pop_free(certs, X509_free);
  }
};
using Certs = std::unique_ptr<STACK_OF(X509), CertsFree>;

Bio MemoryBio(absl::string_view pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
             &BIO_free);
}

// Every PEM certificate in `pem`, in order.
Certs ReadCerts(absl::string_view pem) {
  Certs certs(sk_X509_new_null());
  Bio in = MemoryBio(pem);
  while (certs != nullptr && in != nullptr) {
    X509* cert = PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) break;
    if (sk_X509_push(certs.get(), cert) == 0) {
      X509_free(cert);
      break;
    }
  }
  ERR_clear_error();  // The end of the text reads as an error.
  return certs;
}

std::string SubjectOf(const X509* cert) {
  if (cert == nullptr) return "?";
  char text[256] = {};
  if (X509_NAME_oneline(X509_get_subject_name(cert), text, sizeof(text)) ==
      nullptr) {
    return "?";
  }
  return text;
}

// A CRL file name as CheckCrlDir accepts it: <8 hex digits>.r<digits>.
bool IsCrlName(absl::string_view name) {
  if (name.size() < 11 || name[8] != '.' || name[9] != 'r') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (i == 8 || i == 9) continue;
    const auto c = static_cast<unsigned char>(name[i]);
    if (i < 8 ? !absl::ascii_isxdigit(c) : !absl::ascii_isdigit(c)) {
      return false;
    }
  }
  return true;
}

class Verifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit Verifier(std::shared_ptr<ChainRevocation> revocation)
      : revocation_(std::move(revocation)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/,
              grpc::Status* sync_status) override {
    const grpc::string_ref leaf = request->peer_cert();
    const grpc::string_ref chain = request->peer_cert_full_chain();
    const absl::Status s =
        revocation_->Check(absl::string_view(leaf.data(), leaf.size()),
                           absl::string_view(chain.data(), chain.size()));
    if (s.ok()) {
      *sync_status = grpc::Status::OK;
    } else {
      Log(LogSeverity::kWarning,
          absl::StrCat("TLS handshake refused: ", s.message()));
      *sync_status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                  std::string(s.message()));
    }
    return true;  // Decided synchronously.
  }

  void Cancel(
      grpc::experimental::TlsCustomVerificationCheckRequest* /*request*/)
      override {}

 private:
  const std::shared_ptr<ChainRevocation> revocation_;
};

}  // namespace

ChainRevocation::ChainRevocation(std::string client_ca, std::string crl_dir,
                                 absl::Duration refresh)
    : client_ca_(std::move(client_ca)),
      crl_dir_(std::move(crl_dir)),
      refresh_(refresh) {}

ChainRevocation::~ChainRevocation() = default;

absl::StatusOr<ChainRevocation::Store> ChainRevocation::LoadStore() const {
  Store store(X509_STORE_new(), &X509_STORE_free);
  if (store == nullptr) return absl::ResourceExhaustedError("X509_STORE_new");
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(client_ca_.c_str(), "r"),
                                           &std::fclose);
  if (in == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("tls.client_ca: cannot read ", client_ca_));
  }
  while (true) {
    Cert ca(PEM_read_X509_AUX(in.get(), nullptr, nullptr, nullptr), &X509_free);
    if (ca == nullptr) break;
    X509_STORE_add_cert(store.get(), ca.get());  // Takes its own reference.
  }
  ERR_clear_error();
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(crl_dir_, error)) {
    if (!IsCrlName(entry.path().filename().string())) continue;
    std::unique_ptr<FILE, int (*)(FILE*)> file(
        std::fopen(entry.path().c_str(), "r"), &std::fclose);
    std::unique_ptr<X509_CRL, decltype(&X509_CRL_free)> crl(
        file == nullptr
            ? nullptr
            : PEM_read_X509_CRL(file.get(), nullptr, nullptr, nullptr),
        &X509_CRL_free);
    ERR_clear_error();
    if (crl == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "tls.crl_dir: ", entry.path().string(), " cannot be read as a CRL"));
    }
    X509_STORE_add_crl(store.get(), crl.get());
  }
  ERR_clear_error();  // A CRL added twice (an unchanged file) is no error.
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "tls.crl_dir: cannot list ", crl_dir_, ": ", error.message()));
  }
  return store;
}

absl::StatusOr<ChainRevocation::Store> ChainRevocation::CurrentStore() {
  mu_.Lock();
  const absl::Time now = absl::Now();
  if (store_ != nullptr && (loading_ || now - loaded_at_ < refresh_)) {
    Store store = store_;  // Current, or being re-read by another thread.
    mu_.Unlock();
    return store;
  }
  if (loading_) {
    // The first read, by another thread: wait for it.
    mu_.Await(absl::Condition(
        +[](bool* loading) { return !*loading; }, &loading_));
    Store store = store_;
    mu_.Unlock();
    if (store == nullptr) {
      return absl::UnavailableError(
          "tls.crl_dir: the CAs and CRLs could not be read (see the log)");
    }
    return store;
  }
  loading_ = true;
  mu_.Unlock();
  // Read without the lock: other handshakes keep the store they have.
  absl::StatusOr<Store> loaded = LoadStore();
  const absl::Status read = loaded.status();
  mu_.Lock();
  loading_ = false;
  loaded_at_ = now;  // A failed read is retried after `refresh` too.
  if (loaded.ok()) store_ = *std::move(loaded);
  Store store = store_;
  mu_.Unlock();
  if (!read.ok()) {
    Log(LogSeverity::kWarning,
        absl::StrCat("client certificate revocation: ", read.message(),
                     store == nullptr
                         ? "; refusing client certificates"
                         : "; keeping the CAs and CRLs read before"));
    if (store == nullptr) return read;
  }
  return store;
}

absl::Status ChainRevocation::Check(absl::string_view leaf_pem,
                                    absl::string_view chain_pem) {
  Certs leaf_certs = ReadCerts(leaf_pem);
  if (leaf_certs == nullptr || sk_X509_num(leaf_certs.get()) < 1) {
    return absl::UnauthenticatedError("the client sent no certificate");
  }
  X509* leaf = sk_X509_value(leaf_certs.get(), 0);
  Certs chain = ReadCerts(chain_pem);
  absl::StatusOr<Store> store = CurrentStore();
  if (!store.ok()) return store.status();
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> context(
      X509_STORE_CTX_new(), &X509_STORE_CTX_free);
  if (context == nullptr || X509_STORE_CTX_init(context.get(), store->get(),
                                                leaf, chain.get()) != 1) {
    ERR_clear_error();
    return absl::ResourceExhaustedError("X509_STORE_CTX_init");
  }
  X509_STORE_CTX_set_flags(context.get(),
                           X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  const int verified = X509_verify_cert(context.get());
  ERR_clear_error();
  if (verified == 1) return absl::OkStatus();
  const int error = X509_STORE_CTX_get_error(context.get());
  return absl::UnauthenticatedError(absl::StrCat(
      "client certificate \"", SubjectOf(leaf), "\": chain element \"",
      SubjectOf(X509_STORE_CTX_get_current_cert(context.get())), "\" (depth ",
      X509_STORE_CTX_get_error_depth(context.get()),
      "): ", X509_verify_cert_error_string(error),
      error == X509_V_ERR_UNABLE_TO_GET_CRL
          ? " (every CA of a client's chain needs its CRL in tls.crl_dir)"
          : ""));
}

std::shared_ptr<grpc::experimental::CertificateVerifier>
ChainRevocationVerifier(std::shared_ptr<ChainRevocation> revocation) {
  return grpc::experimental::ExternalCertificateVerifier::Create<Verifier>(
      std::move(revocation));
}

}  // namespace fencegate
