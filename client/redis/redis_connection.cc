// Copyright fencegate authors.

#include "client/redis/redis_connection.h"

#include <sys/time.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "fencegate/common/host_port.h"
#include "hiredis/hiredis.h"

namespace fencegate::client::redis_internal {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

absl::StatusOr<std::unique_ptr<RedisConnection>> RedisConnection::Connect(
    absl::string_view endpoint, absl::Duration timeout) {
  absl::StatusOr<HostPort> parsed =
      ParseHostPort(endpoint, "redis endpoint",
                    {.need_host = true, .allow_port_zero = false});
  if (!parsed.ok()) return parsed.status();
  const std::string& host = parsed->host;
  const int port = parsed->port;
  redisContext* context =
      redisConnectWithTimeout(host.c_str(), port, absl::ToTimeval(timeout));
  if (context == nullptr || context->err != 0) {
    std::string why = context != nullptr ? context->errstr : "out of memory";
    if (context != nullptr) redisFree(context);
    return absl::UnavailableError(
        absl::StrCat("redis at ", endpoint, ": ", why));
  }
  redisSetTimeout(context, absl::ToTimeval(timeout));
  return std::unique_ptr<RedisConnection>(
      new RedisConnection(std::string(endpoint), context));
}

RedisConnection::~RedisConnection() { redisFree(context_); }

absl::StatusOr<void*> RedisConnection::Command(
    const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const std::string& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  void* reply = redisCommandArgv(context_, static_cast<int>(args.size()),
                                 args.data(), lens.data());
  if (reply == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("redis at ", endpoint_, ": ", context_->errstr));
  }
  return reply;
}

absl::StatusOr<int64_t> RedisConnection::EvalInt(
    const std::string& script, const std::vector<std::string>& keys,
    const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"EVAL", script, absl::StrCat(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<void*> raw = Command(argv);
  if (!raw.ok()) return raw.status();
  Reply reply(static_cast<redisReply*>(*raw));
  if (reply->type == REDIS_REPLY_INTEGER) return reply->integer;
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(absl::StrCat(
        "redis at ", endpoint_, ": ", std::string(reply->str, reply->len)));
  }
  return absl::InternalError(absl::StrCat(
      "redis at ", endpoint_, ": unexpected reply type ", reply->type));
}

absl::StatusOr<std::string> RedisConnection::Get(const std::string& key) {
  absl::StatusOr<void*> raw = Command({"GET", key});
  if (!raw.ok()) return raw.status();
  Reply reply(static_cast<redisReply*>(*raw));
  if (reply->type == REDIS_REPLY_STRING) {
    return std::string(reply->str, reply->len);
  }
  if (reply->type == REDIS_REPLY_NIL) return std::string();
  return absl::InternalError(absl::StrCat(
      "redis at ", endpoint_, ": GET gave reply type ", reply->type));
}

}  // namespace fencegate::client::redis_internal
