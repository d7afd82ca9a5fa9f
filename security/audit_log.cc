// Copyright fencegate authors.

#include "security/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"

namespace fencegate {
namespace {

constexpr size_t kMaxQueuedBytes = 16 << 20;

int OpenForAppend(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

std::string JsonLine(v1::AuditRecord record) {
  if (!record.has_time()) {
    const int64_t micros = absl::ToUnixMicros(absl::Now());
    record.mutable_time()->set_seconds(micros / 1000000);
    record.mutable_time()->set_nanos(static_cast<int32_t>(micros % 1000000) *
                                     1000);
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string line;
  if (!google::protobuf::util::MessageToJsonString(record, &line, options)
           .ok()) {
    // Only invalid UTF-8 fails; the gateway checks its strings, but never
    // lose the record over it.
    for (std::string* field :
         {record.mutable_identity(), record.mutable_domain(),
          record.mutable_resource(), record.mutable_request_id(),
          record.mutable_reason()}) {
      *field = absl::StrCat("(not UTF-8, ", field->size(), " bytes)");
    }
    line.clear();
    (void)google::protobuf::util::MessageToJsonString(record, &line, options);
  }
  line += '\n';
  return line;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(
    const std::string& path) {
  const int fd = OpenForAppend(path);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audit_log: cannot open \"", path, "\": ", std::strerror(errno)));
  }
  return std::unique_ptr<AuditLog>(new AuditLog(path, fd));
}

AuditLog::AuditLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
  writer_ = std::make_unique<LineWriter>(LineWriterOptions{
      "audit-writer",
      [this](absl::string_view data) { return WriteToFile(data); },
      [](uint64_t n) {
        v1::AuditRecord record;
        record.set_outcome("audit_dropped");
        record.set_reason(absl::StrCat(n,
                                       " records dropped: the audit log fell "
                                       "more than ",
                                       kMaxQueuedBytes >> 20, " MiB behind"));
        return JsonLine(std::move(record));
      },
      kMaxQueuedBytes});
}

AuditLog::~AuditLog() {
  writer_.reset();
  absl::MutexLock lock(&file_mu_);
  ::close(fd_);
}

void AuditLog::Record(v1::AuditRecord record) {
  writer_->Append(JsonLine(std::move(record)));
}

void AuditLog::Flush() { writer_->Flush(); }

absl::Status AuditLog::Reopen() {
  const int fd = OpenForAppend(path_);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "audit_log: cannot reopen \"", path_, "\": ", std::strerror(errno),
        "; still writing to the file opened before"));
  }
  absl::MutexLock lock(&file_mu_);
  ::close(fd_);
  fd_ = fd;
  return absl::OkStatus();
}

size_t AuditLog::WriteToFile(absl::string_view data) {
  absl::MutexLock lock(&file_mu_);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace fencegate
