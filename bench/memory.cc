// Copyright fencegate authors.

#include "bench/memory.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "fencegate/v1/gateway.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/fixtures.h"

namespace fencegate::bench {
namespace {

constexpr int kClients = 64;

// VmRSS of `pid` in MiB; -1 if unknown.
double RssMib(pid_t pid) {
  const int64_t kb = testing::ProcStatusKb(pid, "VmRSS");
  return kb < 0 ? -1 : static_cast<double>(kb) / 1024.0;
}

std::string DomainName(int64_t i, int bytes) {
  return absl::StrFormat("d%0*d", bytes - 1, i);
}

}  // namespace

int RunMemory(const MemoryOptions& options) {
  std::printf("%10s %12s %10s %12s\n", "name_bytes", "domains", "rss_mib",
              "fences/s");
  for (int bytes : options.name_bytes) {
    const std::string dir =
        absl::StrCat(options.work_dir, "/memory-", bytes, "-", ::getpid());
    std::vector<std::string> flags = {"--route=noop=noop://"};
    flags.insert(flags.end(), options.gateway_flags.begin(),
                 options.gateway_flags.end());
    auto gateway = testing::GatewayProcess::Start(dir, flags);
    if (!gateway.ok()) {
      std::fprintf(stderr, "fencegate-bench: %s\n",
                   std::string(gateway.status().message()).c_str());
      return 1;
    }
    auto channel = grpc::CreateChannel((*gateway)->address(),
                                       grpc::InsecureChannelCredentials());
    std::printf("%10d %12d %10.1f %12s\n", bytes, 0, RssMib((*gateway)->pid()),
                "-");
    int64_t done = 0;
    std::atomic<bool> failed{false};
    for (int64_t checkpoint : options.checkpoints) {
      std::atomic<int64_t> next{done};
      const absl::Time start = absl::Now();
      std::vector<std::thread> clients;
      for (int c = 0; c < kClients; ++c) {
        clients.emplace_back([&] {
          auto stub = v1::Gateway::NewStub(channel);
          for (int64_t i = next++; i < checkpoint && !failed; i = next++) {
            v1::FenceRequest request;
            request.set_domain(DomainName(i, bytes));
            request.set_token(1);
            v1::FenceState state;
            grpc::ClientContext context;
            grpc::Status s = stub->Fence(&context, request, &state);
            if (!s.ok()) {
              std::fprintf(stderr, "fencegate-bench: Fence: %s\n",
                           s.error_message().c_str());
              failed = true;
            }
          }
        });
      }
      for (std::thread& t : clients) t.join();
      if (failed) return 1;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      std::printf("%10d %12lld %10.1f %12.0f\n", bytes,
                  static_cast<long long>(checkpoint), RssMib((*gateway)->pid()),
                  static_cast<double>(checkpoint - done) / seconds);
      std::fflush(stdout);
      done = checkpoint;
    }
    (*gateway)->Stop(SIGTERM);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}

}  // namespace fencegate::bench
