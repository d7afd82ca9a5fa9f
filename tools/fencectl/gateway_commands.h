// Copyright fencegate authors.
//
// fencectl's commands that call the gateway's fencegate.v1.Gateway service:
// write, fence, get and sequence. Each prints the result (text, or JSON with
// --json) to stdout and an error to stderr, and returns fencectl's exit code
// (exit_codes.h).

#ifndef TOOLS_FENCECTL_GATEWAY_COMMANDS_H_
#define TOOLS_FENCECTL_GATEWAY_COMMANDS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace fencegate::fencectl {

// What every gateway command needs.
struct GatewayCall {
  std::shared_ptr<grpc::Channel> channel;
  absl::Duration timeout;
  bool json = false;
  std::string request_id;
};

// `write`: exactly one operation is set (the caller checks).
struct WriteCommand {
  std::string domain;
  uint64_t token = 0;
  std::string resource;
  std::optional<std::string> put, put_file, append, append_file;
  bool del = false;
  std::optional<std::string> sql, statement;
  std::vector<std::string> params;  // TYPE:VALUE each.
  uint64_t seq = 0;                 // 0: none, and one attempt only.
  int attempts = 6;                 // With a seq: attempts in all.
  bool if_absent = false;           // The operation's preconditions.
  std::optional<uint64_t> if_version;
};

int RunWrite(const GatewayCall& call, const WriteCommand& write);
int RunFence(const GatewayCall& call, const std::string& domain,
             uint64_t token);
int RunGet(const GatewayCall& call, const std::string& domain);
int RunSequence(const GatewayCall& call, const std::string& domain);

}  // namespace fencegate::fencectl

#endif  // TOOLS_FENCECTL_GATEWAY_COMMANDS_H_
