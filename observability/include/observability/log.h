// Copyright fencegate authors.
//
// Line logger: one line per event on stderr, with a UTC time stamp and a
// severity letter. The caller formats its line and queues it; one writer
// thread writes whatever is queued with as few write(2) calls as it can, so
// no request thread (gRPC's, the I/O pool's, the fence store's commit
// thread) ever waits for stderr. The writer gathers lines for up to 2 ms
// (or 64 KiB) before writing, so a burst of lines costs one wake-up and one
// system call; a line reaches stderr within about 2 ms. Lines from
// different threads never interleave within a line.
//
// If stderr falls more than 4 MiB behind (a stuck pipe, a full disk), new
// lines are dropped and counted instead of stalling the requests that log
// them, as are lines stderr refuses; once the writer catches up it logs how
// many were dropped. Lines still queued when the process aborts are lost;
// FlushLog() before a normal exit writes them, waiting at most 2 s. Should
// the writer thread fail to start, each caller writes its own line (and
// then does wait for stderr). Not for use after fork() or in a signal
// handler.

#ifndef OBSERVABILITY_LOG_H_
#define OBSERVABILITY_LOG_H_

#include <string>

#include "absl/strings/string_view.h"

namespace fencegate {

enum class LogSeverity { kInfo, kWarning, kError };

// kText: "<UTC time> <I|W|E> <message>". kJson: one fencegate.v1.LogEntry
// (proto/fencegate/v1/log.proto) per line, in protobuf's JSON mapping.
enum class LogFormat { kText, kJson };

// For lines logged from now on. Call once at start-up. Default: kText.
void SetLogFormat(LogFormat format);

// What a line is about, for the JSON format's fields of their own (the text
// format carries them in its message).
struct LogFields {
  absl::string_view request_id;
  absl::string_view trace_id;
};

// `text` with every control character escaped (\n, \r, \t, \xNN), so
// that it stays on one line and cannot pass for another line. Log() applies it
// to every message: text a client controls (an error from its SQL, say) can
// never forge a log line.
std::string EscapeControl(absl::string_view text);

// Thread safe; never waits for stderr.
void Log(LogSeverity severity, absl::string_view message,
         const LogFields& fields = {});

// Returns once every line logged before the call has been written (or
// refused by stderr), or after 2 s. Thread safe.
void FlushLog();

// Sends gRPC's (gpr_log) and protobuf's own log lines through Log(), so
// that they never wait for stderr either: a stalled stderr pipe plus a
// flood of failed TLS handshakes, each of which gRPC logs, cannot stop the
// gateway. Lines announcing an abort (a failed GPR_ASSERT, a protobuf
// FATAL) are written at once instead. Call once at start-up, before gRPC
// starts threads. (libpq's notices on the PostgreSQL route's connections
// never reach stderr: PgConnection takes them. Debian's Abseil has no log
// of its own.)
void CaptureLibraryLogs();

}  // namespace fencegate

#endif  // OBSERVABILITY_LOG_H_
