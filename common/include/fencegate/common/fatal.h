// Copyright fencegate authors.
//
// The one way a fencegate process stops on a broken invariant or a failure
// it must not survive (a fence that cannot be made durable): one line on
// stderr, "FATAL <component>: <message>", written with a single write(2) so
// that it is never interleaved with another thread's output, then abort().
// Callers build the message; nothing here allocates after the message is
// formatted.

#ifndef COMMON_FATAL_H_
#define COMMON_FATAL_H_

#include "absl/strings/string_view.h"

namespace fencegate {

[[noreturn]] void Fatal(absl::string_view component, absl::string_view message);

}  // namespace fencegate

#endif  // COMMON_FATAL_H_
