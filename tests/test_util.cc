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

ScopedTmpdir::ScopedTmpdir(const std::string& dir) {
  const char* current = std::getenv("TMPDIR");
  had_ = current != nullptr;
  if (had_) saved_ = current;
  ::setenv("TMPDIR", dir.c_str(), 1);
}

ScopedTmpdir::~ScopedTmpdir() {
  if (had_) {
    ::setenv("TMPDIR", saved_.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

}  // namespace fencegate::testing
