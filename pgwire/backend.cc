// Copyright fencegate authors.

#include "pgwire/backend.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "pgwire/message_builder.h"
#include "pgwire/wire_reader.h"

namespace fencegate::pgwire {
namespace {

absl::string_view BackendName(char type) {
  switch (type) {
    case 'R':
      return "Authentication";
    case 'K':
      return "BackendKeyData";
    case 'S':
      return "ParameterStatus";
    case 'Z':
      return "ReadyForQuery";
    case 'E':
      return "ErrorResponse";
    case 'N':
      return "NoticeResponse";
    case 'C':
      return "CommandComplete";
    case 'T':
      return "RowDescription";
    case 'D':
      return "DataRow";
    case 't':
      return "ParameterDescription";
    case 'G':
    case 'H':
    case 'W':
      return "CopyResponse";
    case 'd':
      return "CopyData";
    case 'c':
      return "CopyDone";
    case 'A':
      return "NotificationResponse";
    case 'v':
      return "NegotiateProtocolVersion";
    case '1':
      return "ParseComplete";
    case '2':
      return "BindComplete";
    case '3':
      return "CloseComplete";
    case 'n':
      return "NoData";
    case 's':
      return "PortalSuspended";
    case 'I':
      return "EmptyQueryResponse";
    default:
      return {};
  }
}

// The fields up to the terminating zero byte.
NoticeFields ReadFields(WireReader& in) {
  NoticeFields f;
  while (in.ok()) {
    const char code = in.Byte("field code");
    if (code == '\0') break;  // The end (or a failed read).
    f.fields.emplace_back(
        code,
        in.CString(absl::StrCat("field '", absl::string_view(&code, 1), "'")));
  }
  return f;
}

RowDescription ReadRowDescription(WireReader& in) {
  RowDescription r;
  const uint16_t n = in.UInt16("column count");
  for (uint16_t i = 0; i < n && in.ok(); ++i) {
    Column c;
    c.name = in.CString("column name");
    c.table_oid = static_cast<uint32_t>(in.Int32("table OID"));
    c.column = in.Int16("column number");
    c.type_oid = static_cast<uint32_t>(in.Int32("type OID"));
    c.type_size = in.Int16("type size");
    c.type_modifier = in.Int32("type modifier");
    c.format = in.Int16("format");
    r.columns.push_back(c);
  }
  return r;
}

DataRow ReadDataRow(WireReader& in) {
  DataRow r;
  const uint16_t n = in.UInt16("column count");
  for (uint16_t i = 0; i < n && in.ok(); ++i) {
    const int32_t length = in.Int32("value length");
    if (!in.ok()) break;
    if (length == -1) {
      r.values.emplace_back(std::nullopt);
    } else if (length < 0) {
      in.Fail(absl::StrCat("its column ", i + 1, "'s length is ", length));
    } else {
      r.values.emplace_back(in.Bytes(static_cast<size_t>(length), "value"));
    }
  }
  return r;
}

BackendMessage Read(char type, WireReader& in) {
  switch (type) {
    case 'R': {
      Authentication a;
      a.code = in.Int32("authentication code");
      a.data = in.Rest();
      return a;
    }
    case 'K': {
      BackendKeyData k;
      k.process_id = in.Int32("process ID");
      k.secret_key = in.Int32("secret key");
      return k;
    }
    case 'S': {
      ParameterStatus p;
      p.name = in.CString("parameter name");
      p.value = in.CString("parameter value");
      return p;
    }
    case 'Z': {
      const char s = in.Byte("transaction status");
      if (in.ok() && s != 'I' && s != 'T' && s != 'E') {
        in.Fail(absl::StrCat("its transaction status is ",
                             static_cast<int>(static_cast<uint8_t>(s))));
      }
      return ReadyForQuery{static_cast<TransactionStatus>(s)};
    }
    case 'E':
      return ErrorResponse{ReadFields(in)};
    case 'N':
      return NoticeResponse{ReadFields(in)};
    case 'C':
      return CommandComplete{in.CString("command tag")};
    case 'T':
      return ReadRowDescription(in);
    case 'D':
      return ReadDataRow(in);
    case 't': {
      ParameterDescription p;
      const uint16_t n = in.UInt16("parameter count");
      for (uint16_t i = 0; i < n && in.ok(); ++i) {
        p.types.push_back(static_cast<uint32_t>(in.Int32("parameter type")));
      }
      return p;
    }
    case 'G':
    case 'H':
    case 'W': {
      CopyResponse c;
      c.direction = static_cast<CopyResponse::Direction>(type);
      c.format = static_cast<int8_t>(in.Byte("format"));
      const uint16_t n = in.UInt16("column count");
      for (uint16_t i = 0; i < n && in.ok(); ++i) {
        c.column_formats.push_back(in.Int16("column format"));
      }
      return c;
    }
    case 'd':
      return CopyData{in.Rest()};
    case 'c':
      return CopyDone{};
    case 'A': {
      NotificationResponse a;
      a.process_id = in.Int32("process ID");
      a.channel = in.CString("channel");
      a.payload = in.CString("payload");
      return a;
    }
    case 'v': {
      NegotiateProtocolVersion v;
      v.newest_minor = in.Int32("newest minor version");
      const int32_t n = in.Int32("option count");
      if (in.ok() && n < 0) in.Fail(absl::StrCat("its option count is ", n));
      for (int32_t i = 0; i < n && in.ok(); ++i) {
        v.unrecognized.push_back(in.CString("option name"));
      }
      return v;
    }
    case '1':
      return ParseComplete{};
    case '2':
      return BindComplete{};
    case '3':
      return CloseComplete{};
    case 'n':
      return NoData{};
    case 's':
      return PortalSuspended{};
    default:  // 'I', the only one left (ParseBackendMessage).
      return EmptyQueryResponse{};
  }
}

void WriteFields(MessageBuilder& b, const NoticeFields& f) {
  for (const auto& [code, text] : f.fields) b.Byte(code).CString(text);
  b.Byte('\0');
}

}  // namespace

const absl::string_view* NoticeFields::Find(char code) const {
  for (const auto& [c, text] : fields) {
    if (c == code) return &text;
  }
  return nullptr;
}

absl::StatusOr<BackendMessage> ParseBackendMessage(const Frame& frame) {
  const absl::string_view name = BackendName(frame.type);
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown backend message type ",
                     static_cast<int>(static_cast<uint8_t>(frame.type))));
  }
  WireReader in(frame.body, name);
  BackendMessage m = Read(frame.type, in);
  if (absl::Status s = in.Done(); !s.ok()) return s;
  return m;
}

std::string Encode(const BackendMessage& message) {
  return std::visit(
      [](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, Authentication>) {
          return MessageBuilder('R').Int32(m.code).Bytes(m.data).Finish();
        } else if constexpr (std::is_same_v<M, BackendKeyData>) {
          return MessageBuilder('K')
              .Int32(m.process_id)
              .Int32(m.secret_key)
              .Finish();
        } else if constexpr (std::is_same_v<M, ParameterStatus>) {
          return MessageBuilder('S').CString(m.name).CString(m.value).Finish();
        } else if constexpr (std::is_same_v<M, ReadyForQuery>) {
          return MessageBuilder('Z').Byte(static_cast<char>(m.status)).Finish();
        } else if constexpr (std::is_same_v<M, ErrorResponse> ||
                             std::is_same_v<M, NoticeResponse>) {
          MessageBuilder b(std::is_same_v<M, ErrorResponse> ? 'E' : 'N');
          WriteFields(b, m);
          return b.Finish();
        } else if constexpr (std::is_same_v<M, CommandComplete>) {
          return MessageBuilder('C').CString(m.tag).Finish();
        } else if constexpr (std::is_same_v<M, RowDescription>) {
          MessageBuilder b('T');
          b.Int16(static_cast<int16_t>(m.columns.size()));
          for (const Column& c : m.columns) {
            b.CString(c.name)
                .Int32(static_cast<int32_t>(c.table_oid))
                .Int16(c.column)
                .Int32(static_cast<int32_t>(c.type_oid))
                .Int16(c.type_size)
                .Int32(c.type_modifier)
                .Int16(c.format);
          }
          return b.Finish();
        } else if constexpr (std::is_same_v<M, DataRow>) {
          MessageBuilder b('D');
          b.Int16(static_cast<int16_t>(m.values.size()));
          for (const std::optional<absl::string_view>& v : m.values) {
            if (!v.has_value()) {
              b.Int32(-1);
            } else {
              b.Int32(static_cast<int32_t>(v->size())).Bytes(*v);
            }
          }
          return b.Finish();
        } else if constexpr (std::is_same_v<M, ParameterDescription>) {
          MessageBuilder b('t');
          b.Int16(static_cast<int16_t>(m.types.size()));
          for (uint32_t t : m.types) b.Int32(static_cast<int32_t>(t));
          return b.Finish();
        } else if constexpr (std::is_same_v<M, CopyResponse>) {
          MessageBuilder b(static_cast<char>(m.direction));
          b.Byte(static_cast<char>(m.format));
          b.Int16(static_cast<int16_t>(m.column_formats.size()));
          for (int16_t f : m.column_formats) b.Int16(f);
          return b.Finish();
        } else if constexpr (std::is_same_v<M, CopyData>) {
          return MessageBuilder('d').Bytes(m.data).Finish();
        } else if constexpr (std::is_same_v<M, CopyDone>) {
          return MessageBuilder('c').Finish();
        } else if constexpr (std::is_same_v<M, NotificationResponse>) {
          return MessageBuilder('A')
              .Int32(m.process_id)
              .CString(m.channel)
              .CString(m.payload)
              .Finish();
        } else if constexpr (std::is_same_v<M, NegotiateProtocolVersion>) {
          MessageBuilder b('v');
          b.Int32(m.newest_minor);
          b.Int32(static_cast<int32_t>(m.unrecognized.size()));
          for (absl::string_view o : m.unrecognized) b.CString(o);
          return b.Finish();
        } else if constexpr (std::is_same_v<M, ParseComplete>) {
          return MessageBuilder('1').Finish();
        } else if constexpr (std::is_same_v<M, BindComplete>) {
          return MessageBuilder('2').Finish();
        } else if constexpr (std::is_same_v<M, CloseComplete>) {
          return MessageBuilder('3').Finish();
        } else if constexpr (std::is_same_v<M, NoData>) {
          return MessageBuilder('n').Finish();
        } else if constexpr (std::is_same_v<M, PortalSuspended>) {
          return MessageBuilder('s').Finish();
        } else {
          static_assert(std::is_same_v<M, EmptyQueryResponse>);
          return MessageBuilder('I').Finish();
        }
      },
      message);
}

std::string EncodeError(absl::string_view severity, absl::string_view sqlstate,
                        absl::string_view message, absl::string_view detail) {
  ErrorResponse e;
  // 'S' is localized in a server's messages, 'V' never is; send both.
  e.fields = {
      {'S', severity}, {'V', severity}, {'C', sqlstate}, {'M', message}};
  if (!detail.empty()) e.fields.emplace_back('D', detail);
  return Encode(BackendMessage(std::move(e)));
}

}  // namespace fencegate::pgwire
