// Copyright fencegate authors.

#include "pgwire/startup.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "pgwire/message_builder.h"
#include "pgwire/wire_reader.h"

namespace fencegate::pgwire {
namespace {

absl::StatusOr<StartupPacket> ParseStartupMessage(int32_t version,
                                                  WireReader& in) {
  const int major = version >> 16;
  if (major != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported frontend protocol ", major, ".",
                     version & 0xffff, ": the gateway speaks 3.0"));
  }
  StartupMessage m;
  m.protocol_version = version;
  absl::flat_hash_set<absl::string_view> seen;
  while (in.ok()) {
    if (in.remaining() == 0) {
      in.Fail("its parameter list does not end with an empty name");
      break;
    }
    absl::string_view name = in.CString("parameter name");
    if (name.empty()) break;  // The list's end (or a failed read).
    absl::string_view value = in.CString("parameter value");
    if (!in.ok()) break;
    if (!seen.insert(name).second) {
      in.Fail(absl::StrCat("parameter \"", absl::CHexEscape(name),
                           "\" is sent twice"));
      break;
    }
    m.parameters.emplace_back(name, value);
  }
  if (absl::Status s = in.Done(); !s.ok()) return s;
  if (m.Find("user") == nullptr) {
    return absl::InvalidArgumentError(
        "startup packet names no user (the \"user\" parameter)");
  }
  return m;
}

}  // namespace

const absl::string_view* StartupMessage::Find(absl::string_view name) const {
  for (const auto& [n, v] : parameters) {
    if (n == name) return &v;
  }
  return nullptr;
}

absl::StatusOr<StartupPacket> ParseStartupPacket(absl::string_view body) {
  WireReader in(body, "startup");
  const int32_t code = in.Int32("protocol version");
  if (!in.ok()) return in.Done();
  switch (code) {
    case kSslRequestCode:
      if (absl::Status s = in.Done(); !s.ok()) return s;
      return SslRequest{};
    case kGssEncRequestCode:
      if (absl::Status s = in.Done(); !s.ok()) return s;
      return GssEncRequest{};
    case kCancelRequestCode: {
      CancelRequest c;
      c.process_id = in.Int32("process ID");
      c.secret_key = in.Int32("secret key");
      if (absl::Status s = in.Done(); !s.ok()) return s;
      return c;
    }
    default:
      return ParseStartupMessage(code, in);
  }
}

std::string EncodeStartupPacket(const StartupPacket& packet) {
  MessageBuilder b('\0');
  if (const auto* m = std::get_if<StartupMessage>(&packet)) {
    b.Int32(m->protocol_version);
    for (const auto& [name, value] : m->parameters) {
      b.CString(name).CString(value);
    }
    b.Byte('\0');
  } else if (std::holds_alternative<SslRequest>(packet)) {
    b.Int32(kSslRequestCode);
  } else if (std::holds_alternative<GssEncRequest>(packet)) {
    b.Int32(kGssEncRequestCode);
  } else {
    const auto& c = std::get<CancelRequest>(packet);
    b.Int32(kCancelRequestCode).Int32(c.process_id).Int32(c.secret_key);
  }
  return b.Finish();
}

absl::StatusOr<std::vector<StartupOption>> ParseStartupOptions(
    absl::string_view options) {
  // The words, backslash escapes resolved.
  std::vector<std::string> words;
  for (size_t i = 0; i < options.size();) {
    if (absl::ascii_isspace(static_cast<unsigned char>(options[i]))) {
      ++i;
      continue;
    }
    std::string word;
    while (i < options.size() &&
           !absl::ascii_isspace(static_cast<unsigned char>(options[i]))) {
      if (options[i] == '\\' && i + 1 < options.size()) ++i;
      word.push_back(options[i++]);
    }
    words.push_back(std::move(word));
  }
  std::vector<StartupOption> out;
  for (size_t w = 0; w < words.size(); ++w) {
    absl::string_view setting;
    if (words[w] == "-c") {
      if (w + 1 == words.size()) {
        return absl::InvalidArgumentError(
            "options: \"-c\" is not followed by name=value");
      }
      setting = words[++w];
    } else if (absl::StartsWith(words[w], "--") ||
               absl::StartsWith(words[w], "-c")) {
      setting = absl::string_view(words[w]).substr(2);  // --x=1, -cx=1
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "options: \"", absl::CHexEscape(words[w]),
          "\" is not a setting; write -c name=value or --name=value"));
    }
    const size_t eq = setting.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("options: \"", absl::CHexEscape(setting), "\" is not ",
                       eq == 0 ? "a named setting" : "name=value"));
    }
    out.push_back({absl::StrReplaceAll(setting.substr(0, eq), {{"-", "_"}}),
                   std::string(setting.substr(eq + 1))});
  }
  return out;
}

std::string EncodeStartupOptions(const std::vector<StartupOption>& options) {
  std::string out;
  for (const StartupOption& o : options) {
    if (!out.empty()) out.push_back(' ');
    out.append("-c ");
    for (char c : absl::StrCat(o.name, "=", o.value)) {
      if (c == '\\' || absl::ascii_isspace(static_cast<unsigned char>(c))) {
        out.push_back('\\');
      }
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace fencegate::pgwire
