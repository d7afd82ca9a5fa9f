// Copyright fencegate authors.
//
// Fields of a configuration message set from text, as a command-line flag or
// a URI's query gives them, checked against the field's `setting` option
// (proto/fencegate/v1/setting.proto): its bounds, and its default. Server
// code only; not installed.

#ifndef FENCEGATE_COMMON_SETTING_VALUE_H_
#define FENCEGATE_COMMON_SETTING_VALUE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace fencegate {

// Sets `field` of `message` from `text`:
//   string           as it is;
//   uint32           a decimal number within the setting's min and max;
//   bool             "true" or "false";
//   repeated string  a comma-separated list (empty items dropped), replacing
//                    the field's.
// INVALID_ARGUMENT starting with `label` (what the caller calls the value:
// "--io_threads", "pool_size") for text the field cannot take; a field of
// any other type is INVALID_ARGUMENT too.
absl::Status SetFieldFromText(google::protobuf::Message* message,
                              const google::protobuf::FieldDescriptor* field,
                              absl::string_view text, absl::string_view label);

// Whether `field` of `message` is unset: not present, for a field with
// presence; zero, empty or false otherwise.
bool IsUnsetField(const google::protobuf::Message& message,
                  const google::protobuf::FieldDescriptor* field);

// Sets each field of `message` (not of nested messages) that is unset — not
// present, for a field with presence; zero or empty otherwise — and whose
// setting has a default_value, to that default. INTERNAL naming the field if
// a default does not fit it.
absl::Status FillFieldDefaults(google::protobuf::Message* message);

// INVALID_ARGUMENT naming the field and its bounds if a uint32 field of
// `message` (not of nested messages) that is set lies outside its setting's
// min and max: for values that arrived typed (a configuration file) rather
// than as text.
absl::Status CheckFieldBounds(const google::protobuf::Message& message);

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_SETTING_VALUE_H_
