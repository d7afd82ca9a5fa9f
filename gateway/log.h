// Copyright fencegate authors.
//
// Minimal line logger: one line per event on stderr, with a UTC time stamp
// and a severity letter. Lines are written with a single write(2), so lines
// from different threads do not interleave.

#ifndef GATEWAY_LOG_H_
#define GATEWAY_LOG_H_

#include "absl/strings/string_view.h"

namespace fencegate {

enum class LogSeverity { kInfo, kWarning, kError };

// Thread safe.
void Log(LogSeverity severity, absl::string_view message);

}  // namespace fencegate

#endif  // GATEWAY_LOG_H_
