// Copyright fencegate authors.
//
// Reading protobuf text format (the gateway's configuration file, the access
// policy) with errors that name the file, line and column.

#ifndef COMMON_TEXT_PROTO_H_
#define COMMON_TEXT_PROTO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace fencegate {

// Parses text-format `text` into `out`, as LoadTextProtoFile does.
// INVALID_ARGUMENT with `what` and the line and column of the first error.
absl::Status ParseTextProto(absl::string_view text, absl::string_view what,
                            google::protobuf::Message* out);

// Reads a text-format proto file into `out`. INVALID_ARGUMENT with `what`,
// the file name, line and column of the first error; NOT_FOUND if it cannot
// be read.
absl::Status LoadTextProtoFile(const std::string& path, absl::string_view what,
                               google::protobuf::Message* out);

}  // namespace fencegate

#endif  // COMMON_TEXT_PROTO_H_
