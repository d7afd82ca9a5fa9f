// Copyright fencegate authors.
//
// NameThisThread: the name the calling thread shows in top -H, perf, gdb
// and /proc/<pid>/task/<tid>/comm. Every thread the gateway starts names
// itself (docs/architecture.md, "Threads"; ThreadNamesTest checks it), so
// that none shows as the process's own name.
//
// Thread safety: any thread.

#ifndef FENCEGATE_COMMON_THREAD_NAME_H_
#define FENCEGATE_COMMON_THREAD_NAME_H_

#include <sys/types.h>

#include <vector>

#include "absl/strings/string_view.h"

namespace fencegate {

// Linux keeps 15 bytes of a name: a longer one is cut there.
inline constexpr size_t kMaxThreadName = 15;

void NameThisThread(absl::string_view name);

// The threads of this process that nobody named (they show the main
// thread's name), but the main thread: for naming, after the call that
// started them, the threads a library starts without a name (RocksDB 7.8's
// timer). Empty if /proc cannot be read.
std::vector<pid_t> UnnamedThreads();

// Names thread `tid` of this process; false if it has ended.
bool NameThread(pid_t tid, absl::string_view name);

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_THREAD_NAME_H_
