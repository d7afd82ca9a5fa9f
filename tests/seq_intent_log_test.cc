// Copyright fencegate authors.
//
// The root's seq intent log (storage_adapters/file/seq_intent_log.h): every
// domain's newest intent is read back by another instance (another gateway
// process) and after a reopen; compaction keeps the newest of every domain
// and removes the generations it replaced, while other instances go on
// appending to, and reading, the log.

#include "storage_adapters/file/seq_intent_log.h"

#include <fcntl.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fencegate/common/sync_point.h"
#include "storage_adapters/file/checked_slot.h"
#include "tests/fixtures.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

class SeqIntentLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reserved_ = dir_.path() + "/.fencegate";
    std::filesystem::create_directories(reserved_);
    reserved_fd_ = ::open(reserved_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(reserved_fd_, 0);
  }
  void TearDown() override {
    SyncPoint::Get()->ClearAll();
    ::close(reserved_fd_);
  }

  std::unique_ptr<SeqIntentLog> Open(uint64_t compact_bytes = 64 << 20) {
    SeqIntentLog::Options options;
    options.compact_bytes = compact_bytes;
    auto log = SeqIntentLog::Open(reserved_fd_, dir_.path(), options);
    EXPECT_OK(log.status());
    return log.ok() ? *std::move(log) : nullptr;
  }
  // Two instances on the root, as two gateway processes have: a_ and b_.
  void OpenTwo(uint64_t compact_bytes = 64 << 20) {
    a_ = Open(compact_bytes);
    b_ = Open(compact_bytes);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
  }
  static std::string Domain(int i) { return Sha256Hex(absl::StrCat("d", i)); }
  static SeqIntent Intent(uint64_t token, uint64_t seq) {
    SeqIntent intent;
    intent.token = token;
    intent.seq = seq;
    intent.request_hash = Sha256Hex(absl::StrCat(token, "/", seq));
    intent.size_before = seq * 10;
    intent.existed = seq % 2 == 0;
    intent.version = seq + 100;
    return intent;
  }
  static void ExpectNewest(SeqIntentLog& log, int domain, uint64_t token,
                           uint64_t seq) {
    absl::StatusOr<SeqIntent> got = log.Newest(Domain(domain));
    ASSERT_OK(got.status());
    const SeqIntent want = Intent(token, seq);
    EXPECT_EQ(got->token, want.token) << "domain " << domain;
    EXPECT_EQ(got->seq, want.seq) << "domain " << domain;
    EXPECT_EQ(got->request_hash, want.request_hash) << "domain " << domain;
    EXPECT_EQ(got->size_before, want.size_before) << "domain " << domain;
    EXPECT_EQ(got->existed, want.existed) << "domain " << domain;
    EXPECT_EQ(got->version, want.version) << "domain " << domain;
  }
  int LogFiles() const {
    int n = 0;
    for (const auto& e :
         std::filesystem::directory_iterator(reserved_ + "/intents")) {
      n += absl::EndsWith(e.path().string(), ".log") ? 1 : 0;
    }
    return n;
  }

  testing::TempDir dir_;
  std::unique_ptr<SeqIntentLog> a_, b_;
  std::string reserved_;
  int reserved_fd_ = -1;
};

TEST_F(SeqIntentLogTest,
       TheNewestOfADomainIsReadByAnotherInstanceAndAfterReopen) {
  ASSERT_NO_FATAL_FAILURE(OpenTwo());
  std::unique_ptr<SeqIntentLog>& a = a_;
  std::unique_ptr<SeqIntentLog>& b = b_;
  absl::StatusOr<SeqIntent> none = a->Newest(Domain(0));
  ASSERT_OK(none.status());
  EXPECT_EQ(none->seq, 0u);
  ASSERT_OK(a->Append(Domain(0), Intent(3, 1)));
  ASSERT_OK(a->Append(Domain(1), Intent(3, 9)));
  ExpectNewest(*b, 0, 3, 1);
  // The domain's next write through the other instance.
  ASSERT_OK(b->Append(Domain(0), Intent(3, 2)));
  ASSERT_OK(b->Append(Domain(0), Intent(4, 1)));
  ExpectNewest(*a, 0, 4, 1);
  ExpectNewest(*a, 1, 3, 9);
  a.reset();
  b.reset();
  std::unique_ptr<SeqIntentLog> reopened = Open();
  ASSERT_NE(reopened, nullptr);
  ExpectNewest(*reopened, 0, 4, 1);
  ExpectNewest(*reopened, 1, 3, 9);
  EXPECT_EQ(reopened->Append(Domain(0), SeqIntent{}).code(),
            absl::StatusCode::kInternal);  // No seq.
}

// Two instances append the intents of forty domains by turns, with a bound
// small enough to compact many times: every domain's newest survives in
// both, in a reopened log, and one generation file is left.
TEST_F(SeqIntentLogTest, CompactionKeepsTheNewestOfEveryDomain) {
  constexpr uint64_t kBound = 8 << 10;
  ASSERT_NO_FATAL_FAILURE(OpenTwo(kBound));
  std::unique_ptr<SeqIntentLog>& a = a_;
  std::unique_ptr<SeqIntentLog>& b = b_;
  constexpr int kDomains = 40;
  constexpr int kSeqs = 12;
  for (int seq = 1; seq <= kSeqs; ++seq) {
    for (int d = 0; d < kDomains; ++d) {
      SeqIntentLog& log = (seq + d) % 2 == 0 ? *a : *b;
      ASSERT_OK(log.Append(Domain(d), Intent(7, seq)));
    }
  }
  // 40 x 12 records of about 270 bytes, compacted past 4 x 40 x 320.
  EXPECT_GE(std::max(a->generation(), b->generation()), 3u);
  for (int d = 0; d < kDomains; ++d) {
    ExpectNewest(*a, d, 7, kSeqs);
    ExpectNewest(*b, d, 7, kSeqs);
  }
  EXPECT_EQ(LogFiles(), 1);
  a.reset();
  b.reset();
  std::unique_ptr<SeqIntentLog> reopened = Open(kBound);
  ASSERT_NE(reopened, nullptr);
  for (int d = 0; d < kDomains; ++d) ExpectNewest(*reopened, d, 7, kSeqs);
}

// Another instance's append that comes while a compaction holds the log
// (after it read the log, before it removed it) waits for it, and lands in
// the next generation: appended to the old one, it would be lost with it.
TEST_F(SeqIntentLogTest, AnAppendDuringACompactionLandsInTheNextGeneration) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_NO_FATAL_FAILURE(OpenTwo(/*compact_bytes=*/4 << 10));
  std::unique_ptr<SeqIntentLog>& a = a_;
  std::unique_ptr<SeqIntentLog>& b = b_;
  std::thread late;
  std::atomic<bool> fired{false};
  std::atomic<bool> late_ok{false};
  SyncPoint::Get()->SetCallback("SeqIntentLog::Compact:AfterRead", [&](void*) {
    if (fired.exchange(true)) return;
    late = std::thread(
        [&] { late_ok = b->Append(Domain(99), Intent(1, 1)).ok(); });
    // A chance for the append to land in the old generation, if it
    // could; it cannot, so this only gives the check its teeth.
    absl::SleepFor(absl::Milliseconds(50));
  });
  for (uint64_t seq = 1; !fired && seq < 1000; ++seq) {
    ASSERT_OK(a->Append(Domain(0), Intent(1, seq)));
  }
  ASSERT_TRUE(fired);
  late.join();
  EXPECT_TRUE(late_ok);
  SyncPoint::Get()->ClearAll();
  ExpectNewest(*a, 99, 1, 1);
  a.reset();
  b.reset();
  std::unique_ptr<SeqIntentLog> reopened = Open();
  ASSERT_NE(reopened, nullptr);
  ExpectNewest(*reopened, 99, 1, 1);
}

// A compaction cut short after it wrote the next generation, before it
// removed the older one, while another process still appends to the older
// one: the next process to open the log finishes it, so that every process
// then appends to one generation and reads what the others append.
TEST_F(SeqIntentLogTest, AnInterruptedCompactionIsFinishedByTheNextOpen) {
  std::unique_ptr<SeqIntentLog> running = Open();
  ASSERT_NE(running, nullptr);
  ASSERT_OK(running->Append(Domain(0), Intent(1, 1)));
  ASSERT_OK(running->Append(Domain(1), Intent(1, 1)));
  const std::string first = reserved_ + "/intents/00000000000000000001.log";
  absl::StatusOr<std::string> text = testing::ReadFile(first);
  ASSERT_OK(text.status());
  // What the cut-short compaction left: generation 2 beside generation 1.
  testing::WriteFileOrDie(reserved_ + "/intents/00000000000000000002.log",
                          *text);
  ASSERT_OK(running->Append(Domain(0), Intent(1, 2)));  // To generation 1.
  std::unique_ptr<SeqIntentLog> opened = Open();
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ(opened->generation(), 3u);
  EXPECT_EQ(LogFiles(), 1);
  ExpectNewest(*opened, 0, 1, 2);
  // The running process finds its generation removed and moves on.
  ASSERT_OK(running->Append(Domain(0), Intent(1, 3)));
  ExpectNewest(*opened, 0, 1, 3);
  ASSERT_OK(opened->Append(Domain(1), Intent(1, 2)));
  ExpectNewest(*running, 1, 1, 2);
}

// Writers of many domains on two instances at once (two gateway
// processes), compacting as they go: no intent is lost to a compaction
// that copied the log while another instance appended to it.
TEST_F(SeqIntentLogTest, ConcurrentAppendsSurviveConcurrentCompactions) {
  constexpr uint64_t kBound = 16 << 10;
  ASSERT_NO_FATAL_FAILURE(OpenTwo(kBound));
  std::unique_ptr<SeqIntentLog>& a = a_;
  std::unique_ptr<SeqIntentLog>& b = b_;
  constexpr int kWriters = 4;
  constexpr int kDomainsEach = 10;
  constexpr int kSeqs = 30;
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      // Each domain is written by one thread, as its lock would ensure,
      // by turns through both instances.
      for (int seq = 1; seq <= kSeqs; ++seq) {
        for (int i = 0; i < kDomainsEach; ++i) {
          const int d = w * kDomainsEach + i;
          SeqIntentLog& log = (seq + d) % 2 == 0 ? *a : *b;
          if (!log.Append(Domain(d), Intent(2, seq)).ok()) ++failures;
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::unique_ptr<SeqIntentLog> reopened = Open(kBound);
  ASSERT_NE(reopened, nullptr);
  for (int d = 0; d < kWriters * kDomainsEach; ++d) {
    ExpectNewest(*a, d, 2, kSeqs);
    ExpectNewest(*b, d, 2, kSeqs);
    ExpectNewest(*reopened, d, 2, kSeqs);
  }
}

}  // namespace
}  // namespace fencegate
