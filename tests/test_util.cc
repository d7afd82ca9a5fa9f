// Copyright fencegate authors.

#include "tests/test_util.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace fencegate::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base ? base : "/tmp", "/fgtest-XXXXXX");
  char* made = ::mkdtemp(tmpl.data());
  if (made == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    std::abort();
  }
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!std::getenv("FENCEGATE_KEEP_TEST_DIRS"))
    std::filesystem::remove_all(path_, ec);
}

}  // namespace fencegate::testing
