// Copyright fencegate authors.

#include "pgwire/frontend.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "pgwire/message_builder.h"
#include "pgwire/wire_reader.h"

namespace fencegate::pgwire {
namespace {

// Reads a count and that many format codes, each 0 (text) or 1 (binary).
std::vector<int16_t> ReadFormats(WireReader& in, absl::string_view what) {
  const uint16_t n = in.UInt16(absl::StrCat(what, " format count"));
  std::vector<int16_t> formats;
  for (uint16_t i = 0; i < n && in.ok(); ++i) {
    const int16_t f = in.Int16(absl::StrCat(what, " format ", i + 1));
    if (in.ok() && f != 0 && f != 1) {
      in.Fail(absl::StrCat("its ", what, " format ", i + 1, " is ", f,
                           " (0 is text, 1 binary)"));
    }
    formats.push_back(f);
  }
  return formats;
}

Target ReadTarget(WireReader& in) {
  const char t = in.Byte("target");
  if (in.ok() && t != 'S' && t != 'P') {
    in.Fail(absl::StrCat("its target is '", absl::string_view(&t, 1),
                         "', neither 'S' (statement) nor 'P' (portal)"));
  }
  return static_cast<Target>(t);
}

Bind ReadBind(WireReader& in) {
  Bind b;
  b.portal = in.CString("portal name");
  b.statement = in.CString("statement name");
  b.parameter_formats = ReadFormats(in, "parameter");
  const uint16_t n = in.UInt16("parameter count");
  if (in.ok() && b.parameter_formats.size() > 1 &&
      b.parameter_formats.size() != n) {
    in.Fail(absl::StrCat("it has ", b.parameter_formats.size(),
                         " parameter formats for ", n, " parameters"));
  }
  for (uint16_t i = 0; i < n && in.ok(); ++i) {
    const std::string field = absl::StrCat("parameter ", i + 1);
    const int32_t length = in.Int32(absl::StrCat(field, "'s length"));
    if (!in.ok()) break;
    if (length == -1) {
      b.parameters.emplace_back(std::nullopt);
    } else if (length < 0) {
      in.Fail(absl::StrCat("its ", field, "'s length is ", length));
    } else {
      b.parameters.emplace_back(in.Bytes(static_cast<size_t>(length),
                                         absl::StrCat(field, "'s value")));
    }
  }
  b.result_formats = ReadFormats(in, "result");
  return b;
}

// Reads the fields of a message of a known `type`; faults are left in `in`.
FrontendMessage Read(char type, WireReader& in) {
  switch (type) {
    case 'Q':
      return Query{in.CString("query string")};
    case 'P': {
      Parse p;
      p.statement = in.CString("statement name");
      p.sql = in.CString("query string");
      const uint16_t n = in.UInt16("parameter type count");
      for (uint16_t i = 0; i < n && in.ok(); ++i) {
        p.parameter_types.push_back(static_cast<uint32_t>(
            in.Int32(absl::StrCat("parameter type ", i + 1))));
      }
      return p;
    }
    case 'B':
      return ReadBind(in);
    case 'D': {
      Describe d;
      d.target = ReadTarget(in);
      d.name = in.CString("name");
      return d;
    }
    case 'C': {
      Close c;
      c.target = ReadTarget(in);
      c.name = in.CString("name");
      return c;
    }
    case 'E': {
      Execute e;
      e.portal = in.CString("portal name");
      e.max_rows = in.Int32("row limit");
      return e;
    }
    case 'S':
      return Sync{};
    case 'H':
      return Flush{};
    case 'X':
      return Terminate{};
    case 'd':
      return CopyData{in.Rest()};
    case 'c':
      return CopyDone{};
    case 'f':
      return CopyFail{in.CString("error message")};
    default:  // 'p', the only one left (ParseFrontendMessage).
      return PasswordMessage{in.Rest()};
  }
}

void WriteFormats(MessageBuilder& b, const std::vector<int16_t>& formats) {
  b.Int16(static_cast<int16_t>(formats.size()));
  for (int16_t f : formats) b.Int16(f);
}

}  // namespace

absl::StatusOr<FrontendMessage> ParseFrontendMessage(const Frame& frame) {
  absl::string_view name;
  switch (frame.type) {
    case 'Q':
      name = "Query";
      break;
    case 'P':
      name = "Parse";
      break;
    case 'B':
      name = "Bind";
      break;
    case 'D':
      name = "Describe";
      break;
    case 'C':
      name = "Close";
      break;
    case 'E':
      name = "Execute";
      break;
    case 'S':
      name = "Sync";
      break;
    case 'H':
      name = "Flush";
      break;
    case 'X':
      name = "Terminate";
      break;
    case 'd':
      name = "CopyData";
      break;
    case 'c':
      name = "CopyDone";
      break;
    case 'f':
      name = "CopyFail";
      break;
    case 'p':
      name = "PasswordMessage";
      break;
    case 'F':
      return absl::InvalidArgumentError(
          "FunctionCall messages ('F') are not served; call the function "
          "in a query");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown frontend message type ",
                       static_cast<int>(static_cast<uint8_t>(frame.type))));
  }
  WireReader in(frame.body, name);
  FrontendMessage m = Read(frame.type, in);
  if (absl::Status s = in.Done(); !s.ok()) return s;
  return m;
}

std::string Encode(const FrontendMessage& message) {
  return std::visit(
      [](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Query>) {
          return MessageBuilder('Q').CString(m.sql).Finish();
        } else if constexpr (std::is_same_v<M, Parse>) {
          MessageBuilder b('P');
          b.CString(m.statement).CString(m.sql);
          b.Int16(static_cast<int16_t>(m.parameter_types.size()));
          for (uint32_t t : m.parameter_types) b.Int32(static_cast<int32_t>(t));
          return b.Finish();
        } else if constexpr (std::is_same_v<M, Bind>) {
          MessageBuilder b('B');
          b.CString(m.portal).CString(m.statement);
          WriteFormats(b, m.parameter_formats);
          b.Int16(static_cast<int16_t>(m.parameters.size()));
          for (const std::optional<absl::string_view>& p : m.parameters) {
            if (!p.has_value()) {
              b.Int32(-1);
            } else {
              b.Int32(static_cast<int32_t>(p->size())).Bytes(*p);
            }
          }
          WriteFormats(b, m.result_formats);
          return b.Finish();
        } else if constexpr (std::is_same_v<M, Describe>) {
          return MessageBuilder('D')
              .Byte(static_cast<char>(m.target))
              .CString(m.name)
              .Finish();
        } else if constexpr (std::is_same_v<M, Close>) {
          return MessageBuilder('C')
              .Byte(static_cast<char>(m.target))
              .CString(m.name)
              .Finish();
        } else if constexpr (std::is_same_v<M, Execute>) {
          return MessageBuilder('E')
              .CString(m.portal)
              .Int32(m.max_rows)
              .Finish();
        } else if constexpr (std::is_same_v<M, Sync>) {
          return MessageBuilder('S').Finish();
        } else if constexpr (std::is_same_v<M, Flush>) {
          return MessageBuilder('H').Finish();
        } else if constexpr (std::is_same_v<M, Terminate>) {
          return MessageBuilder('X').Finish();
        } else if constexpr (std::is_same_v<M, CopyData>) {
          return MessageBuilder('d').Bytes(m.data).Finish();
        } else if constexpr (std::is_same_v<M, CopyDone>) {
          return MessageBuilder('c').Finish();
        } else if constexpr (std::is_same_v<M, CopyFail>) {
          return MessageBuilder('f').CString(m.message).Finish();
        } else {
          static_assert(std::is_same_v<M, PasswordMessage>);
          return MessageBuilder('p').Bytes(m.data).Finish();
        }
      },
      message);
}

absl::StatusOr<SaslInitialResponse> ParseSaslInitialResponse(
    const PasswordMessage& message) {
  WireReader in(message.data, "SASLInitialResponse");
  SaslInitialResponse r;
  r.mechanism = in.CString("mechanism");
  const int32_t length = in.Int32("response length");
  if (in.ok() && length >= 0) {
    r.data = in.Bytes(static_cast<size_t>(length), "response");
  } else if (in.ok() && length != -1) {
    in.Fail(absl::StrCat("its response length is ", length));
  }
  if (absl::Status s = in.Done(); !s.ok()) return s;
  return r;
}

}  // namespace fencegate::pgwire
