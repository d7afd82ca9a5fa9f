// Copyright fencegate authors.
//
// FlagSet: the harness's small command-line parser (the gateway and
// fencectl use CLI11).
// Accepts --name=value and --name value; booleans also as bare --name; "--"
// ends the flags. Everything else is a positional argument. In flag names
// '-' and '_' are the same: --request-id is --request_id.

#ifndef BENCH_FLAGS_H_
#define BENCH_FLAGS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fencegate {

// Not thread safe; use from main().
class FlagSet {
 public:
  // Registers a flag writing to `*out` (not owned; must outlive Parse()).
  void String(std::string name, std::string* out, std::string help);
  void Uint(std::string name, uint64_t* out, std::string help);
  void Bool(std::string name, bool* out, std::string help);
  // Repeatable; each occurrence appends.
  void StringList(std::string name, std::vector<std::string>* out,
                  std::string help);

  // Parses argv[first..argc). INVALID_ARGUMENT naming the flag for an
  // unknown flag, a missing value or a malformed number.
  absl::Status Parse(int argc, char** argv, int first,
                     std::vector<std::string>* positional);

  // Whether Parse() saw the flag (named with '_').
  bool WasSet(absl::string_view name) const { return set_.contains(name); }

  // One line per flag: "  --name=VALUE  help".
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    bool is_bool = false;
    std::function<absl::Status(absl::string_view)> set;
  };
  const Flag* Find(absl::string_view name) const;

  std::vector<Flag> flags_;
  absl::flat_hash_set<std::string> set_;
};

}  // namespace fencegate

#endif  // BENCH_FLAGS_H_
