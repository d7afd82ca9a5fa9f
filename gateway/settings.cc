// Copyright fencegate authors.

#include "gateway/settings.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fencegate/common/setting_value.h"

namespace fencegate {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

void Collect(const Descriptor* message,
             std::vector<const FieldDescriptor*>* prefix,
             std::vector<SettingField>* out) {
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    prefix->push_back(field);
    if (field->options().HasExtension(v1::setting)) {
      out->push_back(
          SettingField{*prefix, &field->options().GetExtension(v1::setting)});
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE &&
               !field->is_repeated()) {
      Collect(field->message_type(), prefix, out);
    }
    prefix->pop_back();
  }
}

// The message holding `field`'s last step, created along the way.
Message* Holder(const SettingField& field, Message* config) {
  Message* m = config;
  for (size_t i = 0; i + 1 < field.path.size(); ++i) {
    m = m->GetReflection()->MutableMessage(m, field.path[i]);
  }
  return m;
}

}  // namespace

std::string SettingField::ConfigName() const {
  return absl::StrJoin(path, ".",
                       [](std::string* out, const FieldDescriptor* f) {
                         out->append(f->name());
                       });
}

std::string SettingField::DefaultText() const {
  if (!setting->default_text().empty()) return setting->default_text();
  if (!setting->default_value().empty()) return setting->default_value();
  return "none";
}

const std::vector<SettingField>& GatewaySettings() {
  static const std::vector<SettingField>* const kSettings = [] {
    auto* out = new std::vector<SettingField>;
    std::vector<const FieldDescriptor*> prefix;
    Collect(v1::GatewayConfig::descriptor(), &prefix, out);
    return out;
  }();
  return *kSettings;
}

absl::Status SetSetting(const SettingField& field, absl::string_view text,
                        v1::GatewayConfig* config) {
  const FieldDescriptor* f = field.path.back();
  const std::string flag = absl::StrCat("--", field.setting->flag());
  Message* m = Holder(field, config);
  const Reflection* r = m->GetReflection();
  if (f->is_repeated()) {
    // A repeated message with `name` and `uri` (a Route): NAME=URI.
    const Descriptor* type = f->message_type();
    const FieldDescriptor* name =
        type == nullptr ? nullptr : type->FindFieldByName("name");
    const FieldDescriptor* uri =
        type == nullptr ? nullptr : type->FindFieldByName("uri");
    if (name == nullptr || uri == nullptr) {
      return absl::InternalError(
          absl::StrCat(flag, ": the schema gives it no NAME=URI form"));
    }
    std::pair<std::string, std::string> kv =
        absl::StrSplit(text, absl::MaxSplits('=', 1));
    if (kv.first.empty() || kv.second.empty()) {
      // Not quoted: the URI may hold a password.
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": a route is NAME=URI, a name and an adapter URI"));
    }
    Message* added = r->AddMessage(m, f);
    added->GetReflection()->SetString(added, name, kv.first);
    added->GetReflection()->SetString(added, uri, kv.second);
    return absl::OkStatus();
  }
  return SetFieldFromText(m, f, text, flag);
}

absl::Status FillSettingDefaults(v1::GatewayConfig* config) {
  for (const SettingField& field : GatewaySettings()) {
    if (field.setting->default_value().empty() ||
        field.path.back()->is_repeated()) {
      continue;
    }
    const FieldDescriptor* f = field.path.back();
    Message* m = Holder(field, config);
    if (!IsUnsetField(*m, f)) continue;
    if (absl::Status s =
            SetFieldFromText(m, f, field.setting->default_value(), f->name());
        !s.ok()) {
      return absl::InternalError(absl::StrCat(
          "the schema's default of ", field.ConfigName(), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fencegate
