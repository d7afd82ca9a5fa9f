// Copyright fencegate authors.
//
// Running as a service: the example configuration the package installs
// (packaging/fencegate.textproto) holds every setting of the schema and
// is a configuration the gateway starts with; and the gateway tells a
// service manager ($NOTIFY_SOCKET, systemd's Type=notify) that it is ready
// only once it serves, reloading on SIGHUP and stopping on SIGTERM.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "fencegate/v1/config.pb.h"
#include "gateway/config.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/text_format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ReadFile;
using ::fencegate::testing::TempDir;
using ::fencegate::testing::WaitFor;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::TextFormat;

constexpr char kExample[] =
    FENCEGATE_SOURCE_DIR "/packaging/fencegate.textproto";

// The example with its commented-out settings put back: a line whose
// comment starts with `field:`, `field {` or `}` is a setting.
std::string Uncommented(const std::string& text) {
  static const std::regex kSetting(R"(\s*#\s*([a-z_]+\s*[:{]|\}).*)");
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  for (std::string& line : lines) {
    if (std::regex_match(line, kSetting)) {
      const size_t hash = line.find('#');
      line.erase(hash, line[hash + 1] == ' ' ? 2 : 1);
    }
  }
  return absl::StrJoin(lines, "\n");
}

// Appends to `missing` every field of `type` (and of its message fields,
// recursively) that none of `trees` -- the parsed occurrences of one
// message, e.g. every element of a repeated field -- saw in the text.
void FindMissing(const Descriptor* type,
                 const std::vector<const TextFormat::ParseInfoTree*>& trees,
                 const std::string& prefix, std::vector<std::string>* missing) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    std::vector<const TextFormat::ParseInfoTree*> nested;
    bool seen = false;
    for (const TextFormat::ParseInfoTree* tree : trees) {
      if (!field->is_repeated()) {
        if (tree->GetLocation(field, -1).line < 0) continue;
        seen = true;
        if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
          nested.push_back(tree->GetTreeForNested(field, -1));
        }
        continue;
      }
      for (int index = 0; tree->GetLocation(field, index).line >= 0; ++index) {
        seen = true;
        if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
          nested.push_back(tree->GetTreeForNested(field, index));
        }
      }
    }
    const std::string path = absl::StrCat(prefix, field->name());
    if (!seen) {
      missing->push_back(path);
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      FindMissing(field->message_type(), nested, absl::StrCat(path, "."),
                  missing);
    }
  }
}

TEST(ExampleConfigTest, EverySettingOfTheSchemaIsInIt) {
  absl::StatusOr<std::string> text = ReadFile(kExample);
  ASSERT_TRUE(text.ok()) << text.status();
  v1::GatewayConfig config;
  TextFormat::Parser parser;
  TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  ASSERT_TRUE(parser.ParseFromString(Uncommented(*text), &config))
      << "the example, its commented settings put back, does not parse";
  std::vector<std::string> missing;
  FindMissing(v1::GatewayConfig::descriptor(), {&tree}, "", &missing);
  EXPECT_TRUE(missing.empty())
      << "settings missing from packaging/fencegate.textproto: "
      << absl::StrJoin(missing, ", ");
}

TEST(ExampleConfigTest, UncommentingFindsTheCommentedSettings) {
  // The check above can fail: a setting only in a prose comment is not
  // put back.
  const std::string text =
      "# limits {\n#   max_connections: 5\n# }\n# Set: not a field\n";
  EXPECT_EQ(Uncommented(text),
            "limits {\n  max_connections: 5\n}\n# Set: not a field\n");
  v1::GatewayConfig config;
  TextFormat::Parser parser;
  TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  ASSERT_TRUE(parser.ParseFromString(Uncommented(text), &config));
  std::vector<std::string> missing;
  FindMissing(v1::GatewayConfig::descriptor(), {&tree}, "", &missing);
  EXPECT_TRUE(absl::c_linear_search(missing, "listen_address"));
  EXPECT_FALSE(absl::c_linear_search(missing, "limits"));
  EXPECT_TRUE(absl::c_linear_search(missing, "limits.max_ops_per_write"));
}

TEST(ExampleConfigTest, AsShippedItLoadsServesLoopbackAndKeepsStateInVarLib) {
  absl::StatusOr<v1::GatewayConfig> config = LoadConfigFile(kExample);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<GatewayOptions> options = ResolveOptions(*config);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(IsLoopbackAddress(options->listen_address));
  EXPECT_EQ(options->data_dir, "/var/lib/fencegate");
  EXPECT_FALSE(options->insecure_allow_remote);
  EXPECT_TRUE(absl::StartsWith(options->audit_log_path, "/var/log/fencegate/"));
}

// A service manager's notification socket: the datagrams the gateway sends.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    bound_ = fd_ >= 0 &&
             ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval timeout{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  }
  ~NotifySocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool bound() const { return bound_; }

  // The next datagram, or "" after 30 s without one.
  std::string Next() {
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

// Whether the gateway on `port` answers a health check, once, now.
bool Serves(int port) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  return health->Check(&context, request, &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

// The gateway started with NOTIFY_SOCKET=`socket` in its environment.
pid_t StartNotifying(const std::string& socket, const TempDir& dir) {
  const std::string data = absl::StrCat(dir.path(), "/data");
  const std::string env = absl::StrCat("NOTIFY_SOCKET=", socket);
  std::vector<std::string> argv = {
      FENCEGATE_BIN, "--listen=127.0.0.1:0", absl::StrCat("--data_dir=", data),
      absl::StrCat("--port_file=", dir.path(), "/port")};
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  // This process's environment and NOTIFY_SOCKET, built before fork():
  // between fork and exec only async-signal-safe calls are allowed.
  std::vector<char*> c_env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "NOTIFY_SOCKET=")) c_env.push_back(*e);
  }
  c_env.push_back(const_cast<char*>(env.c_str()));
  c_env.push_back(nullptr);
  const std::string log = absl::StrCat(dir.path(), "/log");
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) ::dup2(fd, STDERR_FILENO);
  ::execve(c_argv[0], c_argv.data(), c_env.data());
  ::_exit(127);
}

int PortOf(const TempDir& dir) {
  absl::StatusOr<std::string> text =
      ReadFile(absl::StrCat(dir.path(), "/port"));
  int port = 0;
  if (!text.ok() ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port)) {
    return 0;
  }
  return port;
}

TEST(ServiceNotifyTest, ReadyOnlyOnceItServesThenReloadingAndStopping) {
  TempDir dir;
  const std::string path = absl::StrCat(dir.path(), "/notify");
  NotifySocket manager(path);
  ASSERT_TRUE(manager.bound()) << path;
  const pid_t pid = StartNotifying(path, dir);
  ASSERT_GT(pid, 0);

  const std::string ready = manager.Next();
  ASSERT_TRUE(absl::StrContains(ready, "READY=1")) << "got \"" << ready << "\"";
  // At READY the port is bound and written, and a health check answers at
  // once, with no retry.
  const int port = PortOf(dir);
  ASSERT_NE(port, 0) << "READY=1 came before --port_file was written";
  EXPECT_TRUE(Serves(port)) << "READY=1 came before the gateway served";
  EXPECT_TRUE(absl::StrContains(ready, absl::StrCat("STATUS=serving on ")))
      << ready;

  ASSERT_EQ(::kill(pid, SIGHUP), 0);
  EXPECT_EQ(manager.Next(), "RELOADING=1");
  EXPECT_TRUE(absl::StrContains(manager.Next(), "READY=1"));

  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_TRUE(absl::StrContains(manager.Next(), "STOPPING=1"));
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(ServiceNotifyTest, AManagerThatCannotBeReachedIsLoggedAndServingGoesOn) {
  TempDir dir;
  const pid_t pid =
      StartNotifying(absl::StrCat(dir.path(), "/nobody-listens"), dir);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(WaitFor([&] { return PortOf(dir) != 0; }));
  EXPECT_TRUE(Serves(PortOf(dir)));
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<std::string> log =
        ReadFile(absl::StrCat(dir.path(), "/log"));
    return log.ok() && absl::StrContains(*log, "NOTIFY_SOCKET");
  })) << "no warning about the unreachable service manager";
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace
}  // namespace fencegate
