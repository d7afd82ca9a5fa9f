// Copyright fencegate authors.
//
// AuditLog: the --audit_log file. One JSON object per line
// (fencegate.v1.AuditRecord in protobuf's JSON mapping, original field
// names, every field present; 64-bit numbers are JSON strings): one per
// denied request, per refused token and per fence advance. Records are
// queued and written by a thread of its own (line_writer.h), never by a
// request thread. If the file falls more than 16 MiB behind, records are
// dropped and a record with outcome "audit_dropped" says how many.
// Reopen() (on SIGHUP) starts writing to a new file at the same path, for
// log rotation. Separate from the operational log.

#ifndef SECURITY_AUDIT_LOG_H_
#define SECURITY_AUDIT_LOG_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fencegate/v1/audit.pb.h"
#include "observability/line_writer.h"

namespace fencegate {

// Thread safe.
class AuditLog {
 public:
  // Opens `path` for appending (created 0640 if missing). INVALID_ARGUMENT
  // naming the path if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(
      const std::string& path);
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;
  ~AuditLog();  // Writes what is queued (waiting at most 2 s).

  // Queues one line; sets `time` to now if unset. Never blocks.
  void Record(v1::AuditRecord record);

  // Reopens the path; on error the old file stays in use and the error
  // names the path.
  absl::Status Reopen();

  // Returns once the records queued before the call are written (or after
  // 2 s).
  void Flush();

 private:
  AuditLog(std::string path, int fd);
  size_t WriteToFile(absl::string_view data);

  const std::string path_;
  absl::Mutex file_mu_;
  int fd_ ABSL_GUARDED_BY(file_mu_);
  // Last: its thread writes through fd_, so it stops first.
  std::unique_ptr<LineWriter> writer_;
};

}  // namespace fencegate

#endif  // SECURITY_AUDIT_LOG_H_
