// Copyright fencegate authors.
//
// A fleet of gateways serves no LEASE-bound domain (gateway/fleet_watch.h):
// the count of the other gateways on a file root (presence files), the
// watch's verdict from its routes' counts, and the request gate refusing
// grants, keep-alives and writes of LEASE-bound domains while it fails.

#include "gateway/fleet_watch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "security/policy.h"
#include "security/request_gate.h"
#include "storage_adapters/file/presence.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Property;

// A status of `code` whose message holds `text`.
auto StatusWith(absl::StatusCode code, const std::string& text) {
  return AllOf(StatusIs(code),
               Property(&absl::Status::message, HasSubstr(text)));
}

// Presences of two gateways on one directory count each other, and two
// routes of one gateway count as one; one that goes is no longer counted,
// and the file of a process that died without removing it (unlocked) is
// removed by the next count.
TEST(FilePresenceTest, GatewaysOnOneRootCountEachOther) {
  testing::TempDir dir;
  const std::string gateways = dir.path() + "/gateways";
  auto a = std::make_unique<FilePresence>(gateways, "aaaa");
  auto a2 = std::make_unique<FilePresence>(gateways, "aaaa");  // Same one.
  auto b = std::make_unique<FilePresence>(gateways, "bbbb");
  EXPECT_EQ(*a->Others(), 0);  // b is not present until it counts.
  EXPECT_EQ(*a2->Others(), 0);
  EXPECT_EQ(*b->Others(), 1);
  EXPECT_EQ(*a->Others(), 1);
  b.reset();
  EXPECT_EQ(*a->Others(), 0);
  // A process that ends without its destructor (as after kill -9): the
  // kernel releases its lock, its file stays.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FilePresence dying(gateways, "cccc");
    _exit(dying.Others().ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto files = [&] {
    size_t n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(gateways)) {
      (void)entry;
      ++n;
    }
    return n;
  };
  EXPECT_EQ(files(), 3u);  // a's, a2's and the dead one's.
  EXPECT_EQ(*a->Others(), 0);
  EXPECT_EQ(files(), 2u);
}

// An adapter whose count the test sets.
class CountedAdapter : public StorageAdapter {
 public:
  explicit CountedAdapter(absl::StatusOr<int> others)
      : others_(std::move(others)) {}
  absl::Status Validate(const WriteTarget&, const Operations&) const override {
    return absl::OkStatus();
  }
  absl::Status Apply(const WriteTarget&, const Operations&,
                     OpResults*) override {
    return absl::OkStatus();
  }
  absl::StatusOr<int> OtherGateways() override { return others_; }
  absl::StatusOr<int> others_;
};

TEST(FleetWatchTest, ServesLeaseBoundDomainsOnlyWhenAlone) {
  CountedAdapter alone(0);
  CountedAdapter unshared(absl::UnimplementedError("not shared"));
  CountedAdapter shared(2);
  CountedAdapter unknown(absl::UnavailableError("db down"));
  {
    FleetWatch watch({{"db", &alone}, {"mem", &unshared}}, absl::Hours(1));
    EXPECT_THAT(watch.LeaseServable(),
                StatusIs(absl::StatusCode::kUnavailable));  // Not counted.
    watch.CountAll();
    EXPECT_OK(watch.LeaseServable());
    alone.others_ = 1;
    watch.CountAll();
    EXPECT_THAT(watch.LeaseServable(),
                StatusWith(absl::StatusCode::kFailedPrecondition,
                           ("1 other gateway shares route \"db\"")));
    alone.others_ = 0;
    watch.CountAll();
    EXPECT_OK(watch.LeaseServable());
  }
  {
    FleetWatch watch({{"db", &alone}, {"files", &shared}}, absl::Hours(1));
    watch.CountAll();
    EXPECT_THAT(watch.LeaseServable(),
                StatusWith(absl::StatusCode::kFailedPrecondition,
                           ("ETCD or ZOOKEEPER")));
  }
  {
    FleetWatch watch({{"db", &unknown}}, absl::Hours(1));
    watch.CountAll();
    EXPECT_THAT(watch.LeaseServable(),
                StatusWith(absl::StatusCode::kUnavailable, ("db down")));
  }
  {
    // A count older than three intervals is not trusted.
    FleetWatch watch({{"db", &alone}}, absl::Milliseconds(1));
    watch.CountAll();
    absl::SleepFor(absl::Milliseconds(10));
    EXPECT_THAT(watch.LeaseServable(),
                StatusWith(absl::StatusCode::kUnavailable, ("last counted")));
  }
}

constexpr char kPolicy[] = R"pb(
  rule {
    identities: "worker"
    domain_prefixes: ""
    resource_prefixes: "db/"
    permissions: WRITE
    permissions: LEASE
  }
  rule { identities: "admin" domain_prefixes: "" permissions: ADMIN }
  domain { prefix: "billing/" token_source: LEASE }
)pb";

// While the gateway may not serve LEASE-bound domains, their grants,
// keep-alives and writes are refused with the watch's reason; a Release,
// an operator's Fence and every other domain are not.
TEST(FleetWatchTest, TheGateRefusesLeaseBoundCallsWhileInAFleet) {
  absl::Status servable =
      absl::FailedPreconditionError("1 other gateway shares route \"db\"");
  RequestGateOptions options;
  options.lease_servable = [&servable] { return servable; };
  RequestGate gate(std::move(options));
  v1::Policy proto;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kPolicy, &proto));
  absl::StatusOr<std::shared_ptr<const Policy>> policy =
      Policy::Create(std::move(proto), PolicyEnvironment{});
  ASSERT_OK(policy.status());
  gate.SetPolicy(*policy);

  v1::AcquireRequest acquire;
  acquire.set_name("billing/run");
  v1::KeepAliveRequest keep;
  keep.set_name("billing/run");
  v1::WriteRequest write;
  write.set_domain("billing/run");
  write.set_resource("db/jobs");
  write.set_token(3);
  for (const CallFacts& facts :
       {CallFactsOf(acquire), CallFactsOf(keep), CallFactsOf(write)}) {
    EXPECT_THAT(gate.AdmitIdentity("worker", facts).status(),
                StatusWith(absl::StatusCode::kFailedPrecondition,
                           ("is bound to LEASE")))
        << facts.method;
  }
  v1::ReleaseRequest release;
  release.set_name("billing/run");
  EXPECT_OK(gate.AdmitIdentity("worker", CallFactsOf(release)).status());
  v1::FenceRequest fence;
  fence.set_domain("billing/run");
  fence.set_token(9);
  EXPECT_OK(gate.AdmitIdentity("admin", CallFactsOf(fence)).status());
  write.set_domain("reports/daily");  // Bound to nothing.
  EXPECT_OK(gate.AdmitIdentity("worker", CallFactsOf(write)).status());
  servable = absl::OkStatus();
  write.set_domain("billing/run");
  EXPECT_OK(gate.AdmitIdentity("worker", CallFactsOf(write)).status());
}

}  // namespace
}  // namespace fencegate
