// Copyright fencegate authors.

#include "fencegate/common/setting_value.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fencegate/v1/setting.pb.h"

namespace fencegate {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

namespace {

const v1::Setting* SettingOf(const FieldDescriptor* field) {
  return field->options().HasExtension(v1::setting)
             ? &field->options().GetExtension(v1::setting)
             : nullptr;
}

// A uint32 field's bounds: its setting's, within the type's.
std::pair<uint64_t, uint64_t> BoundsOf(const FieldDescriptor* field) {
  const v1::Setting* setting = SettingOf(field);
  const uint64_t type_max = std::numeric_limits<uint32_t>::max();
  return {setting != nullptr && setting->has_min() ? setting->min() : 0,
          setting != nullptr && setting->has_max()
              ? std::min(setting->max(), type_max)
              : type_max};
}

}  // namespace

bool IsUnsetField(const Message& m, const FieldDescriptor* f) {
  const Reflection* r = m.GetReflection();
  if (f->is_repeated()) return r->FieldSize(m, f) == 0;
  if (f->has_presence()) return !r->HasField(m, f);
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(m, f).empty();
    case FieldDescriptor::CPPTYPE_UINT32:
      return r->GetUInt32(m, f) == 0;
    case FieldDescriptor::CPPTYPE_BOOL:
      return !r->GetBool(m, f);
    default:
      return false;
  }
}

absl::Status SetFieldFromText(Message* message, const FieldDescriptor* field,
                              absl::string_view text, absl::string_view label) {
  const Reflection* r = message->GetReflection();
  if (field->is_repeated()) {
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": cannot be given as text"));
    }
    r->ClearField(message, field);
    for (absl::string_view item :
         absl::StrSplit(text, ',', absl::SkipEmpty())) {
      r->AddString(message, field, std::string(item));
    }
    return absl::OkStatus();
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(message, field, std::string(text));
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_UINT32: {
      const auto [min, max] = BoundsOf(field);
      uint64_t v = 0;
      if (text.empty() || text.size() > 10 ||
          !std::all_of(text.begin(), text.end(), absl::ascii_isdigit) ||
          !absl::SimpleAtoi(text, &v) || v < min || v > max) {
        return absl::InvalidArgumentError(absl::StrCat(
            label, ": \"", text, "\" is not a number from ", min, " to ", max));
      }
      r->SetUInt32(message, field, static_cast<uint32_t>(v));
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (text != "true" && text != "false") {
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": \"", text, "\" is not true or false"));
      }
      r->SetBool(message, field, text == "true");
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(label, ": cannot be given as text"));
  }
}

absl::Status FillFieldDefaults(Message* message) {
  const google::protobuf::Descriptor* d = message->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const v1::Setting* setting = SettingOf(f);
    if (setting == nullptr || setting->default_value().empty() ||
        !IsUnsetField(*message, f)) {
      continue;
    }
    if (absl::Status s = SetFieldFromText(message, f, setting->default_value(),
                                          f->full_name());
        !s.ok()) {
      return absl::InternalError(
          absl::StrCat("the schema's default of ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFieldBounds(const Message& message) {
  const google::protobuf::Descriptor* d = message.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_UINT32 ||
        IsUnsetField(message, f)) {
      continue;
    }
    const uint64_t v = message.GetReflection()->GetUInt32(message, f);
    const auto [min, max] = BoundsOf(f);
    if (v < min || v > max) {
      return absl::InvalidArgumentError(absl::StrCat(
          f->name(), ": ", v, " is not a number from ", min, " to ", max));
    }
  }
  return absl::OkStatus();
}

}  // namespace fencegate
