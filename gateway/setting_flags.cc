// Copyright fencegate authors.

#include "gateway/setting_flags.h"

#include "absl/strings/str_cat.h"

namespace fencegate {

SettingFlags::SettingFlags(CLI::App& app) {
  for (const SettingField& field : GatewaySettings()) {
    auto flag = std::make_unique<Flag>();
    flag->field = &field;
    const v1::Setting& s = *field.setting;
    const std::string name = absl::StrCat("--", s.flag());
    const std::string help =
        absl::StrCat(s.help(), " (default ", field.DefaultText(), ")");
    if (field.path.back()->is_repeated()) {
      flag->option = app.add_option(name, flag->values, help)
                         ->type_name(s.value_name())
                         ->allow_extra_args(false);
    } else if (field.path.back()->type() ==
               google::protobuf::FieldDescriptor::TYPE_BOOL) {
      flag->option = app.add_flag(name, flag->value, help);
    } else {
      flag->option =
          app.add_option(name, flag->value, help)
              ->type_name(s.value_name())
              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    flags_.push_back(std::move(flag));
  }
}

absl::Status SettingFlags::Apply(v1::GatewayConfig* config) const {
  for (const std::unique_ptr<Flag>& flag : flags_) {
    if (flag->option->count() == 0) continue;
    const google::protobuf::FieldDescriptor* f = flag->field->path.back();
    if (f->is_repeated()) {
      // Given on the command line, it replaces the file's list.
      google::protobuf::Message* holder = config;
      for (size_t i = 0; i + 1 < flag->field->path.size(); ++i) {
        holder = holder->GetReflection()->MutableMessage(holder,
                                                         flag->field->path[i]);
      }
      holder->GetReflection()->ClearField(holder, f);
      for (const std::string& v : flag->values) {
        if (absl::Status s = SetSetting(*flag->field, v, config); !s.ok()) {
          return s;
        }
      }
    } else if (flag->value.empty() &&
               f->cpp_type() ==
                   google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
      // An empty value leaves the file's: "--tls_crl_dir=$CRL" with CRL
      // unset must not turn a setting off.
      continue;
    } else if (absl::Status s = SetSetting(*flag->field, flag->value, config);
               !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace fencegate
