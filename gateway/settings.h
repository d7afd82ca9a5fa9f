// Copyright fencegate authors.
//
// The gateway's settings as its configuration schema declares them: every
// field of fencegate.v1.GatewayConfig (config.proto) that carries a
// `(fencegate.v1.setting)` option (setting.proto) is a setting, with its
// flag, help and default. The command line (setting_flags.h), the defaults
// ResolveOptions applies, and the check of docs/operations.md
// (SettingsTest) are all built from this list, so a setting is declared once,
// in the schema.

#ifndef GATEWAY_SETTINGS_H_
#define GATEWAY_SETTINGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "fencegate/v1/config.pb.h"
#include "fencegate/v1/setting.pb.h"

namespace fencegate {

struct SettingField {
  // From GatewayConfig down to the field: {limits, max_message_bytes}.
  std::vector<const google::protobuf::FieldDescriptor*> path;
  const v1::Setting* setting = nullptr;

  // The field's name in the configuration file: "limits.max_message_bytes".
  std::string ConfigName() const;
  // What --help and docs/operations.md show as the default: default_text,
  // else default_value, else "none".
  std::string DefaultText() const;
};

// Every setting, in the schema's order (nested messages depth first). The
// descriptors live as long as the process.
const std::vector<SettingField>& GatewaySettings();

// Sets `field` in `config` from a flag's text: a scalar as SetFieldFromText
// (common/setting_value.h) reads it, a repeated Route as NAME=URI (appended).
// INVALID_ARGUMENT naming the flag for a value that does not fit.
absl::Status SetSetting(const SettingField& field, absl::string_view text,
                        v1::GatewayConfig* config);

// Sets every setting that is zero (empty, 0, false) in `config` and has a
// default_value to it. Touches no nested message that has no such default.
// INTERNAL if the schema holds a default its field cannot take
// (SettingsTest.EveryDefaultFitsItsField keeps that from happening).
absl::Status FillSettingDefaults(v1::GatewayConfig* config);

}  // namespace fencegate

#endif  // GATEWAY_SETTINGS_H_
