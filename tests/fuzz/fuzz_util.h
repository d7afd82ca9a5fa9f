// Copyright fencegate authors.
//
// Helpers shared by the libFuzzer targets: a check that crashes (so that
// libFuzzer records the input), and a scratch directory per target.

#ifndef TESTS_FUZZ_FUZZ_UTIL_H_
#define TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

// Aborts with the failed condition: libFuzzer saves the input as a crash.
#define FG_FUZZ_CHECK(cond)                                                 \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

namespace fencegate::fuzz {

// Aborts if `s` is not OK: set-up of a target that must not fail.
void CheckOk(const absl::Status& s, const char* what);

// A fresh directory for target `name` under $TMPDIR (or /tmp), made once per
// process; removed at exit.
const std::string& ScratchDir(const char* name);

}  // namespace fencegate::fuzz

#endif  // TESTS_FUZZ_FUZZ_UTIL_H_
