// Copyright fencegate authors.
//
// SettingFlags: one command-line flag per setting of the configuration
// schema (settings.h), registered on a CLI11 app. Each takes --flag=VALUE or
// --flag VALUE (a boolean also bare); a flag given twice keeps its last
// value, but --route, which is repeatable and replaces the configuration
// file's routes. A text setting given an empty value keeps the file's, so
// that a variable left unset in "--tls_crl_dir=$CRL" turns nothing off. --help
// shows each flag's help and default from the schema.

#ifndef GATEWAY_SETTING_FLAGS_H_
#define GATEWAY_SETTING_FLAGS_H_

#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
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

}  // namespace fencegate

#endif  // GATEWAY_SETTING_FLAGS_H_
