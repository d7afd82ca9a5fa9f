// Copyright fencegate authors.
//
// SettingFlags: one command-line flag per setting of the configuration
// schema (settings.h), registered on a CLI11 app. Each takes --flag=VALUE or
// --flag VALUE (a boolean also bare); a flag given twice keeps its last
// value, but --route, which is repeatable and replaces the configuration
// file's routes. --help shows each flag's help and default from the schema.

#ifndef GATEWAY_SETTING_FLAGS_H_
#define GATEWAY_SETTING_FLAGS_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fencegate/v1/config.pb.h"
#include "gateway/settings.h"

namespace fencegate {

// Not thread safe; use from main().
class SettingFlags {
 public:
  // Adds the flags to `app`, which must outlive this object's Apply().
  explicit SettingFlags(CLI::App& app);

  SettingFlags(const SettingFlags&) = delete;
  SettingFlags& operator=(const SettingFlags&) = delete;

  // After app.parse(): writes every flag given into `config`, over what the
  // configuration file set. INVALID_ARGUMENT naming the flag for a value
  // its field cannot take.
  absl::Status Apply(v1::GatewayConfig* config) const;

 private:
  struct Flag {
    const SettingField* field;
    std::string value;                // a single field's
    std::vector<std::string> values;  // a repeated field's
    CLI::Option* option = nullptr;
  };
  std::vector<std::unique_ptr<Flag>> flags_;
};

// Rewrites "--some-flag[=v]" to "--some_flag[=v]" in argv[1..argc), so that
// '-' and '_' are one in flag names, as they were before the flags came
// from the schema. Arguments after "--" are left alone.
void NormalizeFlagNames(int argc, char** argv);

}  // namespace fencegate

#endif  // GATEWAY_SETTING_FLAGS_H_
