// Copyright fencegate authors.
//
// Named sync points, after RocksDB's TEST_SYNC_POINT: tests install a
// callback at a named point to force an interleaving (for example "the old
// holder's write is in flight while the new token arrives") instead of
// hoping the scheduler produces it. Compiled to nothing unless the build
// defines FENCEGATE_SYNC_POINTS (tests turn it on; release builds do not).

#ifndef COMMON_SYNC_POINT_H_
#define COMMON_SYNC_POINT_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace fencegate {

// Thread safety: all methods are safe for concurrent use. Callbacks run on
// the thread that reaches the point, without internal locks held.
class SyncPoint {
 public:
  // Receives the argument the point passes (may be null).
  using Callback = std::function<void(void* arg)>;

  static SyncPoint* Get();

  void SetCallback(absl::string_view point, Callback cb);
  void ClearCallback(absl::string_view point);
  void ClearAll();

  // Runs the callback installed for `point`, if any.
  void Process(absl::string_view point, void* arg);

 private:
  SyncPoint() = default;
};

}  // namespace fencegate

#ifdef FENCEGATE_SYNC_POINTS
#define FENCEGATE_SYNC_POINT(name) \
  ::fencegate::SyncPoint::Get()->Process(name, nullptr)
#define FENCEGATE_SYNC_POINT_ARG(name, arg) \
  ::fencegate::SyncPoint::Get()->Process(name, arg)
#else
#define FENCEGATE_SYNC_POINT(name) \
  do {                             \
  } while (0)
#define FENCEGATE_SYNC_POINT_ARG(name, arg) \
  do {                                      \
    (void)(arg);                            \
  } while (0)
#endif

#endif  // COMMON_SYNC_POINT_H_
