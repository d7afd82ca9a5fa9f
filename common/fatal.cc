// Copyright fencegate authors.

#include "fencegate/common/fatal.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace fencegate {

void Fatal(absl::string_view component, absl::string_view message) {
  const std::string line =
      absl::StrCat("FATAL ", component, ": ", message, "\n");
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;  // Nothing more can be done about stderr.
    done += static_cast<size_t>(n);
  }
  std::abort();
}

}  // namespace fencegate
