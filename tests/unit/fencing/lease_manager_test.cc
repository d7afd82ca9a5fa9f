// Copyright fencegate authors.
//
// The built-in lease service's LeaseManager over the real RocksDB store.

#include "fencing/lease_manager.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "fencegate/common/limits.h"
#include "fencegate/common/sync_point.h"
#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "fencing/rocksdb_fence_store.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

class LeaseManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }
  void TearDown() override { SyncPoint::Get()->ClearAll(); }

  void Open(LeaseManagerOptions lease_options = {}) {
    manager_.reset();
    fencer_.reset();
    store_.reset();
    RocksDbFenceStoreOptions options;
    options.path = dir_.path() + "/fence";
    auto store = OpenRocksDbStore(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    fencer_ = std::make_unique<Fencer>(store_.get(), Clock::Real());
    auto manager = LeaseManager::Create(store_.get(), fencer_.get(),
                                        Clock::Real(), lease_options);
    ASSERT_TRUE(manager.ok()) << manager.status();
    manager_ = *std::move(manager);
  }

  // Acquire that waits for its callback.
  absl::StatusOr<AcquireOutcome> Acquire(
      const std::string& name, absl::Duration ttl = absl::Seconds(60),
      absl::Duration wait = absl::ZeroDuration(),
      std::function<bool()> cancelled = nullptr) {
    absl::Notification done;
    absl::StatusOr<AcquireOutcome> result;
    manager_->Acquire(name, "test", "", ttl, wait, std::move(cancelled),
                      [&](absl::StatusOr<AcquireOutcome> outcome) {
                        result = std::move(outcome);
                        done.Notify();
                      });
    done.WaitForNotification();
    return result;
  }

  uint64_t Fence(const std::string& name) {
    return fencer_->Get(name)->highest_token;
  }

  testing::TempDir dir_;
  std::unique_ptr<RocksDbStore> store_;
  std::unique_ptr<Fencer> fencer_;
  std::unique_ptr<LeaseManager> manager_;
};

TEST_F(LeaseManagerTest, GrantsIncreasingTokensAndRaisesTheFence) {
  ASSERT_OK_AND_ASSIGN(first, Acquire("jobs"));
  ASSERT_TRUE(first.acquired);
  EXPECT_EQ(first.lease.token, 1u);
  EXPECT_EQ(Fence("jobs"), 1u);
  ASSERT_OK(manager_->Release("jobs", first.lease.lease_id));
  ASSERT_OK_AND_ASSIGN(second, Acquire("jobs"));
  ASSERT_TRUE(second.acquired);
  EXPECT_EQ(second.lease.token, 2u);
  EXPECT_EQ(Fence("jobs"), 2u);
  EXPECT_NE(second.lease.lease_id, first.lease.lease_id);
}

TEST_F(LeaseManagerTest, TokensStartAboveTheDomainsFence) {
  ASSERT_OK(fencer_->Fence("jobs", 100).status());
  ASSERT_OK_AND_ASSIGN(grant, Acquire("jobs"));
  EXPECT_EQ(grant.lease.token, 101u);
  ASSERT_OK(
      fencer_->Fence("max", std::numeric_limits<uint64_t>::max()).status());
  EXPECT_THAT(Acquire("max"), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_F(LeaseManagerTest, TryAcquireReportsTheHolder) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  ASSERT_OK_AND_ASSIGN(other, Acquire("jobs"));
  EXPECT_FALSE(other.acquired);
  EXPECT_EQ(other.lease.token, held.lease.token);
  EXPECT_EQ(other.lease.owner, "test");
  EXPECT_TRUE(other.lease.lease_id.empty());  // Never leak the handle.
}

TEST_F(LeaseManagerTest, WaiterGetsTheLockOnRelease) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  absl::Notification granted;
  absl::StatusOr<AcquireOutcome> waiter;
  manager_->Acquire("jobs", "waiter", "", absl::Seconds(60), absl::Seconds(60),
                    nullptr, [&](absl::StatusOr<AcquireOutcome> outcome) {
                      waiter = std::move(outcome);
                      granted.Notify();
                    });
  EXPECT_FALSE(granted.HasBeenNotified());
  ASSERT_OK(manager_->Release("jobs", held.lease.lease_id));
  granted.WaitForNotification();
  ASSERT_TRUE(waiter.ok()) << waiter.status();
  ASSERT_TRUE(waiter->acquired);
  EXPECT_EQ(waiter->lease.token, held.lease.token + 1);
  EXPECT_EQ(Fence("jobs"), held.lease.token + 1);
}

TEST_F(LeaseManagerTest, CancelledWaiterIsSkipped) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  absl::Notification finished;
  absl::Status waiter_status;
  manager_->Acquire(
      "jobs", "gone", "", absl::Seconds(60), absl::Seconds(60),
      [] { return true; },
      [&](absl::StatusOr<AcquireOutcome> outcome) {
        waiter_status = outcome.status();
        finished.Notify();
      });
  ASSERT_OK(manager_->Release("jobs", held.lease.lease_id));
  finished.WaitForNotification();
  EXPECT_THAT(waiter_status, StatusIs(absl::StatusCode::kCancelled));
  ASSERT_OK_AND_ASSIGN(next, Acquire("jobs"));
  EXPECT_TRUE(next.acquired);
  EXPECT_EQ(next.lease.token, held.lease.token + 1);  // No token burned.
}

TEST_F(LeaseManagerTest, OnlyTheOwnerReleases) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  EXPECT_THAT(manager_->Release("jobs", "not-the-lease-id"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(manager_->Release("jobs", ""),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_OK(manager_->KeepAlive("jobs", held.lease.lease_id).status());
  ASSERT_OK(manager_->Release("jobs", held.lease.lease_id));
  // A second release by the former owner is refused as well.
  EXPECT_THAT(manager_->Release("jobs", held.lease.lease_id),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(LeaseManagerTest, ExpiredLeaseIsLostAndTheLockPassesOn) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs", absl::Milliseconds(150)));
  // Polling with KeepAlive would renew it; poll with try-acquires instead.
  absl::StatusOr<AcquireOutcome> next;
  ASSERT_TRUE(testing::WaitFor([&] {
    next = Acquire("jobs");
    return next.ok() && next->acquired;
  }));
  EXPECT_GT(next->lease.token, held.lease.token);
  EXPECT_THAT(manager_->KeepAlive("jobs", held.lease.lease_id),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(LeaseManagerTest, LeaseExpiredWhileDownIsExpiredAfterRestart) {
  ASSERT_OK_AND_ASSIGN(short_lease, Acquire("short", absl::Milliseconds(200)));
  ASSERT_OK_AND_ASSIGN(long_lease, Acquire("long", absl::Hours(1)));
  manager_.reset();  // The gateway goes down...
  const absl::Time expiry = absl::Now() + absl::Milliseconds(200);
  ASSERT_TRUE(testing::WaitFor([&] { return absl::Now() > expiry; }));
  Open();  // ...and comes back after the short lease's time has passed.
  ASSERT_OK_AND_ASSIGN(retaken, Acquire("short"));
  EXPECT_TRUE(retaken.acquired);
  EXPECT_EQ(retaken.lease.token, short_lease.lease.token + 1);
  ASSERT_OK_AND_ASSIGN(still_held, Acquire("long"));
  EXPECT_FALSE(still_held.acquired);
  EXPECT_OK(manager_->KeepAlive("long", long_lease.lease.lease_id).status());
}

TEST_F(LeaseManagerTest, TokensNeverGoBackwardsAcrossRestarts) {
  uint64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK_AND_ASSIGN(grant, Acquire("jobs"));
    EXPECT_GT(grant.lease.token, last);
    last = grant.lease.token;
    ASSERT_OK(manager_->Release("jobs", grant.lease.lease_id));
    Open();
  }
}

// A grant waits for a write of the domain that is being applied: the new
// holder's token is not issued while the old holder's write is in flight,
// so no old write lands after the new token exists (rule 4 of the fencing
// contract, for grants).
TEST_F(LeaseManagerTest, GrantIsSerializedWithInFlightWrites) {
  absl::Notification applying, granted;
  bool granted_during_apply = true;
  std::thread old_holder([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 1,
                            [&] {
                              applying.Notify();
                              granted_during_apply =
                                  granted.WaitForNotificationWithTimeout(
                                      absl::Milliseconds(300));
                              return absl::OkStatus();
                            })
                  .status());
  });
  applying.WaitForNotification();
  ASSERT_OK_AND_ASSIGN(grant, Acquire("jobs"));
  granted.Notify();
  old_holder.join();
  EXPECT_FALSE(granted_during_apply);
  EXPECT_EQ(grant.lease.token, 2u);
}

// A grant waiting for a slow write of its domain must not hold up other
// locks: here lock "other" is renewed while the grant of "jobs" waits.
TEST_F(LeaseManagerTest, GrantWaitingForAWriteDoesNotBlockOtherLocks) {
  FENCEGATE_SKIP_WITHOUT_SYNC_POINTS();
  ASSERT_OK_AND_ASSIGN(other, Acquire("other"));
  absl::Notification applying, finish_write, grant_waiting;
  std::thread writer([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 1,
                            [&] {
                              applying.Notify();
                              finish_write.WaitForNotification();
                              return absl::OkStatus();
                            })
                  .status());
  });
  applying.WaitForNotification();
  SyncPoint::Get()->SetCallback("DomainTurns::Queue:Behind",
                                [&](void*) { grant_waiting.Notify(); });
  absl::StatusOr<AcquireOutcome> grant;
  std::thread granter([&] { grant = Acquire("jobs"); });
  grant_waiting.WaitForNotification();
  // The grant now waits for the domain's turn. Renewing another lock must
  // still work.
  absl::Notification renewed;
  absl::Status renew_status;
  std::thread renewer([&] {
    renew_status = manager_->KeepAlive("other", other.lease.lease_id).status();
    renewed.Notify();
  });
  const bool renewed_while_write_ran =
      renewed.WaitForNotificationWithTimeout(absl::Seconds(20));
  finish_write.Notify();
  writer.join();
  granter.join();
  renewer.join();
  EXPECT_TRUE(renewed_while_write_ran);
  EXPECT_OK(renew_status);
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_TRUE(grant->acquired);
  EXPECT_EQ(grant->lease.token, 2u);
}

// Waiting Acquire calls are bounded: past max_waiters one is refused at
// once, unless a waiter whose caller went away can make room.
TEST_F(LeaseManagerTest, WaitingAcquiresAreBounded) {
  LeaseManagerOptions options;
  options.max_waiters = 4;
  Open(options);
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  ASSERT_TRUE(held.acquired);
  ASSERT_OK_AND_ASSIGN(other, Acquire("other"));
  ASSERT_TRUE(other.acquired);
  std::atomic<bool> gone{false};
  std::vector<absl::StatusOr<AcquireOutcome>> outcomes(3);
  absl::Notification first_done;
  manager_->Acquire(
      "jobs", "w0", "a", absl::Seconds(60), absl::Hours(1),
      [&] { return gone.load(); },
      [&](absl::StatusOr<AcquireOutcome> o) {
        outcomes[0] = std::move(o);
        first_done.Notify();
      });
  for (const char* caller : {"c", "d"}) {
    manager_->Acquire("other", "w", caller, absl::Seconds(60), absl::Hours(1),
                      nullptr, [](absl::StatusOr<AcquireOutcome>) {});
  }
  absl::Notification second_done;
  manager_->Acquire("jobs", "w1", "b", absl::Seconds(60), absl::Hours(1),
                    nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                      outcomes[1] = std::move(o);
                      second_done.Notify();
                    });
  // Four wait: a fifth is refused, and says why.
  absl::StatusOr<AcquireOutcome> fifth =
      Acquire("jobs", absl::Seconds(60), absl::Hours(1));
  EXPECT_THAT(fifth.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(fifth.status().message(), HasSubstr("max_waiting_acquires"));
  // A try (wait 0) is never refused for it.
  ASSERT_OK_AND_ASSIGN(try_once, Acquire("jobs"));
  EXPECT_FALSE(try_once.acquired);
  // The first waiter's caller goes away: the next Acquire takes its place,
  // and the abandoned one is told so at once.
  gone = true;
  absl::Notification third_done;
  manager_->Acquire("jobs", "w2", "e", absl::Seconds(60), absl::Hours(1),
                    nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                      outcomes[2] = std::move(o);
                      third_done.Notify();
                    });
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(outcomes[0].status(), StatusIs(absl::StatusCode::kCancelled));
  EXPECT_FALSE(third_done.HasBeenNotified());
  // The lock passes to the waiters in order.
  ASSERT_OK(manager_->Release("jobs", held.lease.lease_id));
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_OK(outcomes[1].status());
  EXPECT_TRUE(outcomes[1]->acquired);
  ASSERT_OK(manager_->Release("jobs", outcomes[1]->lease.lease_id));
  ASSERT_TRUE(third_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_OK(outcomes[2].status());
  EXPECT_TRUE(outcomes[2]->acquired);
}

// One caller, or one lock, may have at most half of max_waiters waiting:
// a caller filling its half leaves the other half to the others.
TEST_F(LeaseManagerTest, OneCallerCannotTakeEveryWaitingPlace) {
  LeaseManagerOptions options;
  options.max_waiters = 8;
  Open(options);
  for (const char* name : {"l1", "l2", "l3", "l4", "l5"}) {
    ASSERT_OK_AND_ASSIGN(held, Acquire(name));
    ASSERT_TRUE(held.acquired);
  }
  int refused_greedy = 0;
  // The greedy caller spreads its waiters over three locks.
  for (int i = 0; i < 6; ++i) {
    const std::string name = i < 3 ? "l1" : (i < 5 ? "l2" : "l3");
    manager_->Acquire(name, "w", "greedy", absl::Seconds(60), absl::Hours(1),
                      nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                        if (absl::IsResourceExhausted(o.status())) {
                          ++refused_greedy;
                        }
                      });
  }
  EXPECT_EQ(refused_greedy, 2);  // Four wait: half of eight.
  // Another caller still gets a place.
  absl::StatusOr<AcquireOutcome> polite;
  bool polite_done = false;
  manager_->Acquire("l4", "w", "polite", absl::Seconds(60), absl::Hours(1),
                    nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                      polite = std::move(o);
                      polite_done = true;
                    });
  EXPECT_FALSE(polite_done) << polite.status();  // Waiting, not refused.
  manager_->Shutdown();  // Ends the waiters while their callbacks' data live.
}

TEST_F(LeaseManagerTest, OneLockCannotTakeEveryWaitingPlace) {
  LeaseManagerOptions options;
  options.max_waiters = 8;
  Open(options);
  for (const char* name : {"busy", "quiet"}) {
    ASSERT_OK_AND_ASSIGN(held, Acquire(name));
    ASSERT_TRUE(held.acquired);
  }
  for (const char* caller : {"a", "b", "c", "d"}) {
    manager_->Acquire("busy", "w", caller, absl::Seconds(60), absl::Hours(1),
                      nullptr, [](absl::StatusOr<AcquireOutcome>) {});
  }
  absl::StatusOr<AcquireOutcome> crowded;
  manager_->Acquire(
      "busy", "w", "e", absl::Seconds(60), absl::Hours(1), nullptr,
      [&](absl::StatusOr<AcquireOutcome> o) { crowded = std::move(o); });
  EXPECT_THAT(crowded.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(crowded.status().message(), HasSubstr("for one lock"));
  bool quiet_done = false;
  manager_->Acquire("quiet", "w", "e", absl::Seconds(60), absl::Hours(1),
                    nullptr,
                    [&](absl::StatusOr<AcquireOutcome>) { quiet_done = true; });
  EXPECT_FALSE(quiet_done);  // Waiting, not refused.
  manager_->Shutdown();  // Ends the waiters while their callbacks' data live.
}

// A handover to a waiter waits for its domain's turn, behind a write in
// flight, without holding up the Release that handed it over.
TEST_F(LeaseManagerTest, AHandoverWaitsForTheDomainsTurnWithoutBlocking) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  absl::Notification granted;
  absl::StatusOr<AcquireOutcome> waiter;
  manager_->Acquire("jobs", "next", "", absl::Seconds(60), absl::Hours(1),
                    nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                      waiter = std::move(o);
                      granted.Notify();
                    });
  absl::Notification applying, finish_write;
  std::thread writer([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 1,
                            [&] {
                              applying.Notify();
                              finish_write.WaitForNotification();
                              return absl::OkStatus();
                            })
                  .status());
  });
  applying.WaitForNotification();
  absl::Notification released;
  absl::Status release_status;
  std::thread releaser([&] {
    release_status = manager_->Release("jobs", held.lease.lease_id);
    released.Notify();
  });
  const bool released_while_write_ran =
      released.WaitForNotificationWithTimeout(absl::Seconds(20));
  const bool granted_while_write_ran = granted.HasBeenNotified();
  finish_write.Notify();
  writer.join();
  releaser.join();
  EXPECT_TRUE(released_while_write_ran);
  EXPECT_FALSE(granted_while_write_ran);
  ASSERT_OK(release_status);
  ASSERT_TRUE(granted.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_OK(waiter.status());
  EXPECT_TRUE(waiter->acquired);
  EXPECT_EQ(waiter->lease.token, 2u);
}

// A grant whose caller went away while it waited for the domain's turn is
// not made, and the lock stays free.
TEST_F(LeaseManagerTest, AGrantWhoseCallerLeftWhileItWaitedIsNotMade) {
  absl::Notification applying, finish_write;
  std::thread writer([&] {
    EXPECT_OK(fencer_
                  ->Execute("jobs", 1,
                            [&] {
                              applying.Notify();
                              finish_write.WaitForNotification();
                              return absl::OkStatus();
                            })
                  .status());
  });
  applying.WaitForNotification();
  std::atomic<bool> gone{false};
  absl::Notification done;
  absl::StatusOr<AcquireOutcome> outcome;
  manager_->Acquire(
      "jobs", "left", "", absl::Seconds(60), absl::ZeroDuration(),
      [&] { return gone.load(); },
      [&](absl::StatusOr<AcquireOutcome> o) {
        outcome = std::move(o);
        done.Notify();
      });
  gone = true;
  finish_write.Notify();
  writer.join();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(outcome, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(Fence("jobs"), 1u);  // No token was granted.
  ASSERT_OK_AND_ASSIGN(next, Acquire("jobs"));
  EXPECT_EQ(next.lease.token, 2u);
}

TEST_F(LeaseManagerTest, KeepAliveDuringShutdownIsUnavailableNotLost) {
  ASSERT_OK_AND_ASSIGN(held, Acquire("jobs"));
  manager_->Shutdown();
  EXPECT_THAT(manager_->KeepAlive("jobs", held.lease.lease_id),
              StatusIs(absl::StatusCode::kUnavailable));
  Open();  // Restarted: the lease is still there.
  EXPECT_OK(manager_->KeepAlive("jobs", held.lease.lease_id).status());
}

TEST_F(LeaseManagerTest, BadArguments) {
  EXPECT_THAT(Acquire(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Acquire("jobs", absl::Milliseconds(10)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Acquire("jobs", absl::Hours(2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(manager_->KeepAlive("jobs", "x"),
              StatusIs(absl::StatusCode::kNotFound));
  absl::Notification done;
  absl::StatusOr<AcquireOutcome> bad_owner;
  manager_->Acquire("jobs", "owner\xff", "", absl::Seconds(1),
                    absl::ZeroDuration(), nullptr,
                    [&](absl::StatusOr<AcquireOutcome> o) {
                      bad_owner = std::move(o);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_THAT(bad_owner.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Acquire("jobs\xff").status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Strings a caller supplies are bounded before anything is stored or
// logged; the refusal names the field and its size, never the value.
TEST_F(LeaseManagerTest, CallerStringsAreBounded) {
  auto acquire_as = [&](const std::string& owner) {
    absl::Notification done;
    absl::StatusOr<AcquireOutcome> outcome;
    manager_->Acquire("jobs", owner, "", absl::Seconds(1), absl::ZeroDuration(),
                      nullptr, [&](absl::StatusOr<AcquireOutcome> o) {
                        outcome = std::move(o);
                        done.Notify();
                      });
    done.WaitForNotification();
    return outcome;
  };
  const std::string huge(kMaxOwnerBytes + 1, 'o');
  absl::StatusOr<AcquireOutcome> refused = acquire_as(huge);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.status().message(), HasSubstr("owner: 257 bytes"));
  EXPECT_EQ(refused.status().message().find(huge.substr(0, 64)),
            absl::string_view::npos);
  absl::StatusOr<std::vector<LeaseRecord>> stored = store_->LoadLeases();
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(stored->empty());
  absl::StatusOr<AcquireOutcome> granted =
      acquire_as(std::string(kMaxOwnerBytes, 'o'));
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_TRUE(granted->acquired);
  EXPECT_THAT(
      manager_->KeepAlive("jobs", std::string(kMaxLeaseIdBytes + 1, 'x')),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(manager_->Release("jobs", std::string(kMaxLeaseIdBytes + 1, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate
