// Copyright fencegate authors.
//
// FencerTest: a Fencer over the real RocksDB fence store, with a write
// helper that records the tokens its applies saw, for the tests of the
// fencing contract (fencer_test.cc, fencer_try_execute_test.cc).

#ifndef TESTS_FENCER_FIXTURE_H_
#define TESTS_FENCER_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "fencing/clock.h"
#include "fencing/fencer.h"
#include "tests/fence_store_fixture.h"

namespace fencegate::testing {

class FencerTest : public FenceStoreFixture {
 protected:
  void SetUp() override { Open(); }

  // (Re)opens the store and a Fencer over it.
  void Open() {
    fencer_.reset();
    OpenStore();
    fencer_ = std::make_unique<Fencer>(store_.get(), Clock::Real());
  }

  // Execute() with an apply that records `token` in applied_.
  absl::StatusOr<FenceDecision> Write(const std::string& domain,
                                      uint64_t token) {
    return fencer_->Execute(domain, token, [&] {
      absl::MutexLock lock(&mu_);
      applied_.push_back(token);
      return absl::OkStatus();
    });
  }

  std::vector<uint64_t> Applied() {
    absl::MutexLock lock(&mu_);
    return applied_;
  }

  std::unique_ptr<Fencer> fencer_;
  absl::Mutex mu_;
  std::vector<uint64_t> applied_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fencegate::testing

#endif  // TESTS_FENCER_FIXTURE_H_
