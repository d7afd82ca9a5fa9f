// Copyright fencegate authors.

#include "observability/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fencegate/v1/log.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/support/log.h"
#include "observability/line_writer.h"

namespace fencegate {
namespace {

constexpr size_t kMaxQueuedBytes = 4 << 20;
// How long FlushLog() waits for stderr.
constexpr absl::Duration kFlushWait = absl::Seconds(2);

// Writes all of `data` to stderr; returns how many bytes it wrote (fewer
// if stderr fails).
size_t WriteAll(absl::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(STDERR_FILENO, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // Nowhere to report a failing stderr.
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

std::string EscapeControl(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::atomic<LogFormat> g_format{LogFormat::kText};

std::string JsonLine(LogSeverity severity, absl::string_view message,
                     const LogFields& fields) {
  v1::LogEntry entry;
  const int64_t micros = absl::ToUnixMicros(absl::Now());
  entry.mutable_time()->set_seconds(micros / 1000000);
  entry.mutable_time()->set_nanos(static_cast<int32_t>(micros % 1000000) *
                                  1000);
  entry.set_severity(severity == LogSeverity::kInfo      ? "info"
                     : severity == LogSeverity::kWarning ? "warning"
                                                         : "error");
  // Escaped as in the text format, so that both carry the same message.
  entry.set_message(EscapeControl(message));
  entry.set_request_id(std::string(fields.request_id));
  entry.set_trace_id(std::string(fields.trace_id));
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string line;
  if (!google::protobuf::util::MessageToJsonString(entry, &line, options)
           .ok()) {
    // Only invalid UTF-8 fails (an error text a client caused): keep the
    // line, in ASCII.
    entry.set_message(absl::CHexEscape(message));
    entry.set_request_id(absl::CHexEscape(fields.request_id));
    entry.set_trace_id(absl::CHexEscape(fields.trace_id));
    line.clear();
    (void)google::protobuf::util::MessageToJsonString(entry, &line, options);
  }
  line += '\n';
  return line;
}

std::string Line(LogSeverity severity, absl::string_view message,
                 const LogFields& fields = {}) {
  if (g_format.load(std::memory_order_relaxed) == LogFormat::kJson) {
    return JsonLine(severity, message, fields);
  }
  const char* level = severity == LogSeverity::kInfo      ? "I"
                      : severity == LogSeverity::kWarning ? "W"
                                                          : "E";
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                       absl::UTCTimeZone()),
                      " ", level, " ", EscapeControl(message), "\n");
}

LineWriter* Logger() {
  static LineWriter* const writer = new LineWriter(LineWriterOptions{
      "log-writer", [](absl::string_view data) { return WriteAll(data); },
      [](uint64_t n) {
        return Line(
            LogSeverity::kWarning,
            absl::StrCat("log: ", n, " lines dropped: stderr fell more than ",
                         kMaxQueuedBytes >> 20, " MiB behind"));
      },
      kMaxQueuedBytes});
  return writer;
}

}  // namespace

void SetLogFormat(LogFormat format) { g_format = format; }

void Log(LogSeverity severity, absl::string_view message,
         const LogFields& fields) {
  Logger()->Append(Line(severity, message, fields));
}

void FlushLog() { Logger()->Flush(kFlushWait); }

}  // namespace fencegate

namespace fencegate {
namespace {

// A line from a library that is about to abort the process: written at
// once, since the writer thread may never get to it.
void WriteNow(absl::string_view what, absl::string_view message) {
  FlushLog();
  (void)WriteAll(absl::StrCat(what, ": ", EscapeControl(message), "\n"));
}

void OnGrpcLog(gpr_log_func_args* args) {
  const absl::string_view message =
      args->message == nullptr ? "" : args->message;
  if (absl::StartsWith(message, "assertion failed")) {
    WriteNow("grpc", message);  // GPR_ASSERT aborts next.
    return;
  }
  const LogSeverity severity =
      args->severity == GPR_LOG_SEVERITY_ERROR   ? LogSeverity::kError
      : args->severity == GPR_LOG_SEVERITY_INFO  ? LogSeverity::kInfo
      : args->severity == GPR_LOG_SEVERITY_DEBUG ? LogSeverity::kInfo
                                                 : LogSeverity::kWarning;
  Log(severity, absl::StrCat("grpc: ", message, " (",
                             args->file == nullptr ? "" : args->file, ":",
                             args->line, ")"));
}

void OnProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                   const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    WriteNow("protobuf", message);
    return;
  }
  Log(level == google::protobuf::LOGLEVEL_ERROR     ? LogSeverity::kError
      : level == google::protobuf::LOGLEVEL_WARNING ? LogSeverity::kWarning
                                                    : LogSeverity::kInfo,
      absl::StrCat("protobuf: ", message, " (", file == nullptr ? "" : file,
                   ":", line, ")"));
}

}  // namespace

void CaptureLibraryLogs() {
  gpr_set_log_function(&OnGrpcLog);
  google::protobuf::SetLogHandler(&OnProtobufLog);
}

}  // namespace fencegate
