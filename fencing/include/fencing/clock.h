// Copyright fencegate authors.
//
// Clock: the source of wall-clock time stamps recorded with fence advances.
// Behind an interface so that tests can fix time.

#ifndef FENCING_CLOCK_H_
#define FENCING_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace fencegate {

// Thread safety: implementations are safe for concurrent use.
class Clock {
 public:
  Clock() = default;
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;
  virtual ~Clock() = default;

  // Current wall-clock time.
  virtual absl::Time Now() = 0;

  // The process-wide real clock. Never null; never deleted.
  static Clock* Real();
};

}  // namespace fencegate

#endif  // FENCING_CLOCK_H_
