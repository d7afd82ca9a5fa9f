// Copyright fencegate authors.

#include "tests/etcd_server.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "tests/fixtures.h"

namespace fencegate::testing {
namespace {

constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// wait_for_ready: the calling thread then drives the connection attempt. A
// fail-fast call returns at once while the channel reconnects, leaving the
// attempt unpolled until gRPC's 5 s backup poller, so a poll loop of
// fail-fast calls can miss a freshly started etcd for a long time.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  context->set_wait_for_ready(true);
}

absl::Status ToStatus(const grpc::Status& status, const char* what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdServer>> EtcdServer::Start(
    const EtcdTls& tls) {
  if (::access(kEtcdBinary, X_OK) != 0) {
    return absl::UnavailableError("no /usr/bin/etcd: run scripts/setup.sh");
  }
  std::unique_ptr<EtcdServer> server(new EtcdServer());
  server->tls_ = tls;
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (!tls.ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadFile(tls.ca);
    absl::StatusOr<std::string> cert = ReadFile(tls.client_cert);
    absl::StatusOr<std::string> key = ReadFile(tls.client_key);
    if (!ca.ok() || !cert.ok() || !key.ok()) {
      return absl::InvalidArgumentError("etcd TLS files cannot be read");
    }
    ssl.pem_root_certs = *ca;
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
    credentials = grpc::SslCredentials(ssl);
  }
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base ? base : "/tmp", "/fgetcd-XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::UnavailableError("mkdtemp failed");
  }
  server->dir_ = tmpl;
  // A port picked by FreeLoopbackPort() can be taken before etcd binds it: then
  // etcd exits, and we try other ports.
  absl::Status launched;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::error_code ec;
    std::filesystem::remove_all(absl::StrCat(server->dir_, "/data"), ec);
    server->client_port_ = FreeLoopbackPort();
    server->peer_port_ = FreeLoopbackPort();
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(server->endpoint(), credentials, args);
    server->kv_ = etcdserverpb::KV::NewStub(channel);
    server->lease_ = etcdserverpb::Lease::NewStub(channel);
    launched = server->Launch();
    if (launched.ok()) break;
  }
  if (!launched.ok()) return launched;
  return server;
}

absl::Status EtcdServer::Launch() {
  const std::string client_url =
      absl::StrCat(tls_.ca.empty() ? "http://" : "https://", endpoint());
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
  std::vector<std::string> argv = {
      kEtcdBinary,
      "--name=fgtest",
      absl::StrCat("--data-dir=", dir_, "/data"),
      absl::StrCat("--listen-client-urls=", client_url),
      absl::StrCat("--advertise-client-urls=", client_url),
      absl::StrCat("--listen-peer-urls=", peer_url),
      absl::StrCat("--initial-advertise-peer-urls=", peer_url),
      absl::StrCat("--initial-cluster=fgtest=", peer_url),
      "--initial-cluster-state=new",
      "--logger=zap",
      "--log-outputs=stderr",
  };
  if (!tls_.ca.empty()) {
    argv.push_back(absl::StrCat("--cert-file=", tls_.cert));
    argv.push_back(absl::StrCat("--key-file=", tls_.key));
    argv.push_back(absl::StrCat("--trusted-ca-file=", tls_.ca));
    argv.push_back("--client-cert-auth");
  }
  const std::string log_path = absl::StrCat(dir_, "/etcd.log");
  // Never outlive a killed test (nor the forking thread: the test's main
  // thread, which starts and restarts etcd).
  const pid_t pid = SpawnServer(argv, log_path);
  if (pid < 0) return absl::UnavailableError("fork failed");
  pid_ = pid;
  if (absl::Status s = WaitUntilServing(); !s.ok()) {
    Kill();
    absl::StatusOr<std::string> log = ReadFile(log_path);
    return absl::UnavailableError(
        absl::StrCat(s.message(), "; etcd log:\n", log.ok() ? *log : "(none)"));
  }
  return absl::OkStatus();
}

absl::Status EtcdServer::WaitUntilServing() {
  bool exited = false;
  bool serving = WaitFor(
      [&] {
        int status;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          exited = true;
          return true;
        }
        // Linearizable: answers only once this member is the leader.
        grpc::ClientContext context;
        SetDeadline(&context, absl::Milliseconds(500));
        etcdserverpb::RangeRequest request;
        request.set_key("fencegate-test-ping");
        etcdserverpb::RangeResponse response;
        return kv_->Range(&context, request, &response).ok();
      },
      absl::Seconds(60));
  if (exited) return absl::UnavailableError("etcd exited while starting");
  if (!serving) return absl::UnavailableError("etcd did not answer in 60 s");
  return absl::OkStatus();
}

void EtcdServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::Status EtcdServer::Restart() {
  Kill();
  return Launch();
}

EtcdServer::~EtcdServer() {
  Kill();
  std::error_code ec;
  if (!dir_.empty() && !std::getenv("FENCEGATE_KEEP_TEST_DIRS")) {
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string EtcdServer::endpoint() const {
  return absl::StrCat("127.0.0.1:", client_port_);
}

absl::StatusOr<std::vector<mvccpb::KeyValue>> EtcdServer::RangePrefix(
    const std::string& prefix) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);  // Test prefixes are ASCII.
  request.set_range_end(end);
  request.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  request.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  etcdserverpb::RangeResponse response;
  grpc::Status status = kv_->Range(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "Range");
  return std::vector<mvccpb::KeyValue>(response.kvs().begin(),
                                       response.kvs().end());
}

absl::StatusOr<int64_t> EtcdServer::Put(const std::string& key,
                                        const std::string& value) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  etcdserverpb::PutResponse response;
  grpc::Status status = kv_->Put(&context, request, &response);
  if (!status.ok()) return ToStatus(status, "Put");
  return response.header().revision();
}

absl::Status EtcdServer::Delete(const std::string& key) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(key);
  etcdserverpb::DeleteRangeResponse response;
  return ToStatus(kv_->DeleteRange(&context, request, &response),
                  "DeleteRange");
}

absl::Status EtcdServer::Compact(int64_t revision) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  etcdserverpb::CompactionRequest request;
  request.set_revision(revision);
  request.set_physical(true);
  etcdserverpb::CompactionResponse response;
  return ToStatus(kv_->Compact(&context, request, &response), "Compact");
}

absl::Status EtcdServer::RevokeLease(int64_t lease_id) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  return ToStatus(lease_->LeaseRevoke(&context, request, &response),
                  "LeaseRevoke");
}

}  // namespace fencegate::testing
