// Copyright fencegate authors.

#include "fencing/reserve_fs.h"

#include <fcntl.h>
#include <unistd.h>

#include <utility>

namespace fencegate {
namespace {

bool OutOfDescriptors(const rocksdb::IOStatus& s) {
  if (s.ok()) return false;
  const std::string text = s.ToString();
  return text.find("Too many open files") != std::string::npos;
}

}  // namespace

ReserveFs::ReserveFs(std::shared_ptr<rocksdb::FileSystem> base, int reserve)
    : rocksdb::FileSystemWrapper(std::move(base)), target_(reserve) {
  Refill();
}

ReserveFs::~ReserveFs() {
  absl::MutexLock lock(&mu_);
  for (int fd : fds_) ::close(fd);
}

int ReserveFs::reserved() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(fds_.size());
}

bool ReserveFs::Release() {
  absl::MutexLock lock(&mu_);
  if (fds_.empty()) return false;
  ::close(fds_.back());
  fds_.pop_back();
  return true;
}

void ReserveFs::Refill() {
  absl::MutexLock lock(&mu_);
  while (static_cast<int>(fds_.size()) < target_) {
    const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;  // None to spare now; try again after the next open.
    fds_.push_back(fd);
  }
}

template <typename Open>
rocksdb::IOStatus ReserveFs::WithReserve(Open open) {
  rocksdb::IOStatus s = open();
  // Another thread may take the descriptor just freed: try again while the
  // reserve lasts.
  while (OutOfDescriptors(s) && Release()) s = open();
  if (s.ok()) Refill();
  return s;
}

rocksdb::IOStatus ReserveFs::NewWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve(
      [&] { return target()->NewWritableFile(name, options, result, dbg); });
}

rocksdb::IOStatus ReserveFs::ReopenWritableFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve(
      [&] { return target()->ReopenWritableFile(name, options, result, dbg); });
}

rocksdb::IOStatus ReserveFs::ReuseWritableFile(
    const std::string& name, const std::string& old_name,
    const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSWritableFile>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve([&] {
    return target()->ReuseWritableFile(name, old_name, options, result, dbg);
  });
}

rocksdb::IOStatus ReserveFs::NewSequentialFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSSequentialFile>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve(
      [&] { return target()->NewSequentialFile(name, options, result, dbg); });
}

rocksdb::IOStatus ReserveFs::NewRandomAccessFile(
    const std::string& name, const rocksdb::FileOptions& options,
    std::unique_ptr<rocksdb::FSRandomAccessFile>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve([&] {
    return target()->NewRandomAccessFile(name, options, result, dbg);
  });
}

rocksdb::IOStatus ReserveFs::NewDirectory(
    const std::string& name, const rocksdb::IOOptions& options,
    std::unique_ptr<rocksdb::FSDirectory>* result,
    rocksdb::IODebugContext* dbg) {
  return WithReserve(
      [&] { return target()->NewDirectory(name, options, result, dbg); });
}

}  // namespace fencegate
