// Copyright fencegate authors.

#include "pgwire/message_builder.h"

namespace fencegate::pgwire {

MessageBuilder::MessageBuilder(char type) {
  if (type != '\0') out_.push_back(type);
  length_at_ = out_.size();
  out_.append(4, '\0');
}

MessageBuilder& MessageBuilder::Byte(char b) {
  out_.push_back(b);
  return *this;
}

MessageBuilder& MessageBuilder::Int16(int16_t v) {
  const auto u = static_cast<uint16_t>(v);
  out_.push_back(static_cast<char>(u >> 8));
  out_.push_back(static_cast<char>(u & 0xff));
  return *this;
}

MessageBuilder& MessageBuilder::Int32(int32_t v) {
  const auto u = static_cast<uint32_t>(v);
  for (int shift = 24; shift >= 0; shift -= 8) {
    out_.push_back(static_cast<char>((u >> shift) & 0xff));
  }
  return *this;
}

MessageBuilder& MessageBuilder::CString(absl::string_view s) {
  s = s.substr(0, s.find('\0'));
  out_.append(s.data(), s.size());
  out_.push_back('\0');
  return *this;
}

MessageBuilder& MessageBuilder::Bytes(absl::string_view bytes) {
  out_.append(bytes.data(), bytes.size());
  return *this;
}

std::string MessageBuilder::Finish() {
  const auto length = static_cast<uint32_t>(out_.size() - length_at_);
  for (int i = 0; i < 4; ++i) {
    out_[length_at_ + i] = static_cast<char>((length >> (24 - 8 * i)) & 0xff);
  }
  return std::move(out_);
}

}  // namespace fencegate::pgwire
