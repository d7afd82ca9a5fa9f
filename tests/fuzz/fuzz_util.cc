// Copyright fencegate authors.

#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"

namespace fencegate::fuzz {

void CheckOk(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "fuzz set-up failed: %s: %s\n", what,
               s.ToString().c_str());
  std::abort();
}

const std::string& ScratchDir(const char* name) {
  static const std::string* dir = [name] {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp",
                                    "/fgfuzz-", name, "-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    auto* d = new std::string(tmpl);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return d;
  }();
  return *dir;
}

}  // namespace fencegate::fuzz

// libFuzzer calls it once before the first input: protobuf's parse errors
// (invalid UTF-8 in a string field, ...) are expected by the thousand and
// would only slow the run down.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}
