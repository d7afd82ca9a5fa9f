// Copyright fencegate authors.

#include "bench/flags.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fencegate {

void FlagSet::String(std::string name, std::string* out, std::string help) {
  flags_.push_back(
      {std::move(name), std::move(help), false, [out](absl::string_view v) {
         *out = std::string(v);
         return absl::OkStatus();
       }});
}

void FlagSet::Uint(std::string name, uint64_t* out, std::string help) {
  std::string flag = name;
  flags_.push_back(
      {std::move(name), std::move(help), false,
       [out, flag](absl::string_view v) {
         if (v.empty() || v.size() > 20 ||
             !std::all_of(v.begin(), v.end(), absl::ascii_isdigit) ||
             !absl::SimpleAtoi(v, out)) {
           return absl::InvalidArgumentError(absl::StrCat(
               "--", flag, ": \"", v,
               "\" is not a number from 0 to 18446744073709551615"));
         }
         return absl::OkStatus();
       }});
}

void FlagSet::Bool(std::string name, bool* out, std::string help) {
  std::string flag = name;
  flags_.push_back({std::move(name), std::move(help), true,
                    [out, flag](absl::string_view v) {
                      if (v.empty() || v == "true" || v == "1") {
                        *out = true;
                      } else if (v == "false" || v == "0") {
                        *out = false;
                      } else {
                        return absl::InvalidArgumentError(absl::StrCat(
                            "--", flag, ": \"", v, "\" is not true or false"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagSet::StringList(std::string name, std::vector<std::string>* out,
                         std::string help) {
  flags_.push_back(
      {std::move(name), std::move(help), false, [out](absl::string_view v) {
         out->emplace_back(v);
         return absl::OkStatus();
       }});
}

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  std::string normalized(name);
  std::replace(normalized.begin(), normalized.end(), '-', '_');
  for (const Flag& f : flags_) {
    if (f.name == normalized) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(int argc, char** argv, int first,
                            std::vector<std::string>* positional) {
  for (int i = first; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional->emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      positional->emplace_back(arg);
      continue;
    }
    arg.remove_prefix(2);
    absl::string_view name = arg;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value && !flag->is_bool) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, ": a value is required"));
      }
      value = argv[++i];
    }
    if (absl::Status s = flag->set(value); !s.ok()) return s;
    set_.insert(flag->name);
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out;
  for (const Flag& f : flags_) {
    std::string left = absl::StrCat("  --", f.name, f.is_bool ? "" : "=VALUE");
    if (left.size() < 28) left.resize(28, ' ');
    absl::StrAppend(&out, left, " ", f.help, "\n");
  }
  return out;
}

}  // namespace fencegate
