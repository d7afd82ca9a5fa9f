// Copyright fencegate authors.
//
// Fuzzes resource paths (and data) through the file adapter: Validate, then
// Apply of a put, append or delete, in a scratch root that holds symlinks
// leading out of it (relative and absolute) and one that stays inside, next
// to an "outside" directory with a secret. Checks, beyond "no crash, no UB,
// no leak":
//   - nothing outside the root is created, changed or removed;
//   - a put that succeeds left exactly its data at the path.
// The scene (its symlinks included, which an input may replace) is put back
// after every input, so that each input starts from the same state.

#include <fuzzer/FuzzedDataProvider.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "storage_adapters/file/file_adapter.h"
#include "tests/fuzz/fuzz_util.h"

namespace fencegate {
namespace {

namespace fs = std::filesystem;

constexpr char kSecret[] = "secret contents";

struct Scene {
  std::string root, outside;
  std::unique_ptr<FileAdapter> adapter;
};

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  FG_FUZZ_CHECK(out.good());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The outside directory holds its secret and nothing else.
void CheckOutsideUntouched(const Scene& s) {
  int entries = 0;
  for (const auto& e : fs::directory_iterator(s.outside)) {
    FG_FUZZ_CHECK(e.path().filename() == "secret");
    ++entries;
  }
  FG_FUZZ_CHECK(entries == 1);
  FG_FUZZ_CHECK(ReadAll(s.outside + "/secret") == kSecret);
}

// Puts the scene back: removes what the input created, and the symlinks
// and directory an input may have replaced, then makes them again.
void Clean(const Scene& s) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(s.root))
    fs::remove_all(e.path(), ec);
  FG_FUZZ_CHECK(::mkdir((s.root + "/sub").c_str(), 0755) == 0);
  FG_FUZZ_CHECK(::symlink("../outside", (s.root + "/out_rel").c_str()) == 0);
  FG_FUZZ_CHECK(::symlink(s.outside.c_str(), (s.root + "/out_abs").c_str()) ==
                0);
  FG_FUZZ_CHECK(::symlink("sub", (s.root + "/in_link").c_str()) == 0);
}

Scene& TheScene() {
  static Scene* scene = [] {
    auto* s = new Scene;
    const std::string& base = fuzz::ScratchDir("file");
    s->root = base + "/root";
    s->outside = base + "/outside";
    FG_FUZZ_CHECK(::mkdir(s->root.c_str(), 0755) == 0);
    FG_FUZZ_CHECK(::mkdir(s->outside.c_str(), 0755) == 0);
    WriteFile(s->outside + "/secret", kSecret);
    Clean(*s);
    auto adapter = FileAdapter::Open(s->root);
    fuzz::CheckOk(adapter.status(), "file adapter");
    s->adapter = *std::move(adapter);
    return s;
  }();
  return *scene;
}

}  // namespace
}  // namespace fencegate

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fencegate;  // NOLINT
  Scene& scene = TheScene();
  FuzzedDataProvider in(data, size);
  for (int n = 0; n < 4 && in.remaining_bytes() > 0; ++n) {
    // One operation: a kind byte and the path, then the data.
    const std::string head = in.ConsumeRandomLengthString(512);
    const std::string body = in.ConsumeRandomLengthString(256);
    if (head.empty()) continue;
    const uint8_t kind = static_cast<uint8_t>(head[0]) % 3;
    const std::string path = head.substr(1);
    Operations ops;
    v1::Operation* op = ops.Add();
    if (kind == 0) op->mutable_put()->set_data(body);
    if (kind == 1) op->mutable_append()->set_data(body);
    if (kind == 2) op->mutable_delete_();
    const WriteTarget target{"d", 1, path, ""};
    // A refused path is not applied (the gateway never applies it either).
    if (!scene.adapter->Validate(target, ops).ok()) continue;
    OpResults results;
    const absl::Status s = scene.adapter->Apply(target, ops, &results);
    if (s.ok() && kind == 0) {
      FG_FUZZ_CHECK(ReadAll(scene.root + "/" + path) == body);
    }
    CheckOutsideUntouched(scene);
  }
  Clean(scene);
  return 0;
}
