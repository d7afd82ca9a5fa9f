// Copyright fencegate authors.

#include "bench/cpu_meter.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace fencegate::bench {
namespace {

constexpr double kBurnSeconds = 0.3;
// /proc counts in clock ticks (10 ms): allow one tick of rounding.
constexpr double kTick = 0.011;

// Spins until this process has used `seconds` of CPU since `from`.
void Burn(double seconds, double from = 0) {
  timespec ts;
  do {
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  } while (ts.tv_sec + ts.tv_nsec / 1e9 - from < seconds);
}

double ProcessCpu() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// A child that signals readiness through `ready`, then waits for a byte
// on `go` and runs `body`, then waits to be killed.
template <typename Body>
pid_t StartChild(int ready[2], int go[2], Body body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    char c = 0;
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    if (::read(go[0], &c, 1) != 1) ::_exit(2);
    body();
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    ::pause();
    ::_exit(0);
  }
  return pid;
}

class CpuMeterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(ready_), 0);
    ASSERT_EQ(::pipe(go_), 0);
  }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
    for (int fd : {ready_[0], ready_[1], go_[0], go_[1]}) ::close(fd);
  }
  void WaitReady() {
    char c;
    ASSERT_EQ(::read(ready_[0], &c, 1), 1);
  }
  void Go() {
    char c = 0;
    ASSERT_EQ(::write(go_[1], &c, 1), 1);
  }

  int ready_[2];
  int go_[2];
  pid_t child_ = 0;
};

TEST_F(CpuMeterTest, CountsTheProcessItMeters) {
  child_ = StartChild(ready_, go_, [] { Burn(kBurnSeconds); });
  ASSERT_GT(child_, 0);
  WaitReady();
  CpuMeter meter(child_, 0, 0);
  const CpuTimes before = meter.Sample();
  Go();
  WaitReady();
  const CpuTimes used = meter.Sample() - before;
  EXPECT_GE(used.gateway.cpu_s, kBurnSeconds - kTick);
  EXPECT_GE(used.gateway.switches, 0);
  // Not metered: unknown, not zero.
  EXPECT_LT(used.postgres.cpu_s, 0);
  EXPECT_LT(used.postgres.switches, 0);
  EXPECT_LT(used.pgbouncer.cpu_s, 0);
  // /proc/stat rounds user and system time to ticks apart.
  EXPECT_GE(used.machine_busy, kBurnSeconds - 3 * kTick);
  EXPECT_GE(used.machine_total, used.machine_busy);
}

TEST_F(CpuMeterTest, CountsLiveAndReapedDescendants) {
  // Like a postmaster: one backend that is still running when sampled,
  // and one that has exited and been reaped.
  child_ = StartChild(ready_, go_, [] {
    pid_t reaped = ::fork();
    if (reaped == 0) {
      Burn(kBurnSeconds);
      ::_exit(0);
    }
    ::waitpid(reaped, nullptr, 0);
    int done[2];
    if (::pipe(done) != 0) ::_exit(2);
    pid_t live = ::fork();
    if (live == 0) {
      // Killed with its parent at the end of the test.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      Burn(kBurnSeconds);
      char c = 0;
      if (::write(done[1], &c, 1) != 1) ::_exit(2);
      ::pause();
      ::_exit(0);
    }
    char c;
    if (::read(done[0], &c, 1) != 1) ::_exit(2);
  });
  ASSERT_GT(child_, 0);
  WaitReady();
  CpuMeter meter(0, child_, 0);
  const CpuTimes before = meter.Sample();
  Go();
  WaitReady();
  const CpuTimes used = meter.Sample() - before;
  EXPECT_GE(used.postgres.cpu_s, 2 * kBurnSeconds - 2 * kTick);
  EXPECT_LT(used.gateway.cpu_s, 0);
}

TEST_F(CpuMeterTest, CountsTheHarnessItself) {
  CpuMeter meter(0, 0, 0);
  const CpuTimes before = meter.Sample();
  Burn(kBurnSeconds, ProcessCpu());
  // A thread that sleeps blocks: one voluntary context switch per sleep.
  constexpr int kSleeps = 10;
  absl::Notification slept, sampled;
  std::thread sleeper([&] {
    for (int i = 0; i < kSleeps; ++i) ::usleep(1000);
    slept.Notify();
    sampled.WaitForNotification();
  });
  slept.WaitForNotification();
  const CpuTimes used = meter.Sample() - before;
  sampled.Notify();
  sleeper.join();
  EXPECT_GE(used.harness.cpu_s, kBurnSeconds - kTick);
  EXPECT_GE(used.harness.switches, kSleeps);
}

TEST_F(CpuMeterTest, AnExitedProcessReadsAsUnknown) {
  child_ = StartChild(ready_, go_, [] {});
  ASSERT_GT(child_, 0);
  WaitReady();
  CpuMeter meter(child_, 0, 0);
  const CpuTimes before = meter.Sample();
  EXPECT_GE(before.gateway.cpu_s, 0);
  ::kill(child_, SIGKILL);
  ::waitpid(child_, nullptr, 0);
  child_ = 0;
  EXPECT_LT((meter.Sample() - before).gateway.cpu_s, 0);
}

TEST(CpuTimesTest, MachineBusyIsHeldWithinTheTotal) {
  // 63 ticks, all busy, read as tick counts over the tick rate: the two
  // differences round apart, busy above the total.
  CpuTimes earlier;
  earlier.machine_total = 790567487 / 100.0;
  earlier.machine_busy = 87735021 / 100.0;
  CpuTimes later;
  later.machine_total = (790567487 + 63) / 100.0;
  later.machine_busy = (87735021 + 63) / 100.0;
  ASSERT_GT(later.machine_busy - earlier.machine_busy,
            later.machine_total - earlier.machine_total);
  CpuTimes d = later - earlier;
  EXPECT_EQ(d.machine_busy, d.machine_total);
  EXPECT_NEAR(d.machine_total, 0.63, 1e-6);

  // An iowait count that steps back.
  later.machine_busy = earlier.machine_busy + 2;
  later.machine_total = earlier.machine_total + 1.5;
  d = later - earlier;
  EXPECT_EQ(d.machine_busy, 1.5);

  // Never below zero.
  later.machine_busy = earlier.machine_busy - 1;
  d = later - earlier;
  EXPECT_EQ(d.machine_busy, 0);
}

}  // namespace
}  // namespace fencegate::bench
