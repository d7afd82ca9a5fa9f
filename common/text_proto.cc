// Copyright fencegate authors.

#include "fencegate/common/text_proto.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace fencegate {
namespace {

class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (message_.empty()) {
      message_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
    }
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view what,
                            google::protobuf::Message* out) {
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ":", errors.message()));
  }
  return absl::OkStatus();
}

absl::Status LoadTextProtoFile(const std::string& path, absl::string_view what,
                               google::protobuf::Message* out) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(what, " \"", path, "\": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseTextProto(text.str(), absl::StrCat(what, " \"", path, "\""), out);
}

}  // namespace fencegate
