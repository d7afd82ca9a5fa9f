// Copyright fencegate authors.
//
// The PostgreSQL protocol decoder (pgwire/): framing of a byte stream, the
// startup packet and its options, the frontend and backend messages. Each
// parser refuses what is malformed with an error naming the message and
// field, and writes back what it parsed byte for byte. The bytes of the
// canonical messages are written out here by hand, from the protocol's
// documentation, so the encoders are checked against something other than
// themselves.

#include <string>
#include <variant>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pgwire/backend.h"
#include "pgwire/frame.h"
#include "pgwire/frontend.h"
#include "pgwire/message_builder.h"
#include "pgwire/startup.h"
#include "tests/test_util.h"

namespace fencegate::pgwire {
namespace {

using ::fencegate::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string Raw(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

// The single frame `bytes` must hold.
Frame WholeFrame(absl::string_view bytes) {
  absl::StatusOr<std::optional<Frame>> f = NextFrame(bytes, 1 << 20);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok() || !f->has_value()) return {};
  EXPECT_EQ((*f)->size, bytes.size());
  return **f;
}

absl::StatusOr<FrontendMessage> ParseFrontend(absl::string_view bytes) {
  return ParseFrontendMessage(WholeFrame(bytes));
}
absl::StatusOr<BackendMessage> ParseBackend(absl::string_view bytes) {
  return ParseBackendMessage(WholeFrame(bytes));
}

TEST(PgwireFrameTest, AMessageIsSplitOnlyWhenWhole) {
  // Query "SELECT 1": 'Q', length 13, the text and its NUL; then a Sync.
  const std::string query = Raw({'Q', 0, 0, 0, 13}) + std::string("SELECT 1") +
                            Raw({0}) + Raw({'S', 0, 0, 0, 4});
  for (size_t n = 0; n < 14; ++n) {
    absl::StatusOr<std::optional<Frame>> f = NextFrame(query.substr(0, n), 64);
    ASSERT_TRUE(f.ok()) << n << ": " << f.status();
    EXPECT_FALSE(f->has_value()) << n;
  }
  ASSERT_OK_AND_ASSIGN(first, NextFrame(query, 64));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->type, 'Q');
  EXPECT_EQ(first->size, 14u);
  EXPECT_EQ(first->body, absl::string_view("SELECT 1\0", 9));
  ASSERT_OK_AND_ASSIGN(second, NextFrame(query.substr(first->size), 64));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->type, 'S');
  EXPECT_TRUE(second->body.empty());
}

TEST(PgwireFrameTest, BadAndOversizedLengthsAreToldFromTheHeader) {
  EXPECT_THAT(NextFrame(Raw({'Q', 0, 0, 0, 3}), 64),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // 1 + 64 bytes is over a limit of 64; only the header has arrived.
  EXPECT_THAT(NextFrame(Raw({'d', 0, 0, 0, 64}), 64),
              StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK_AND_ASSIGN(partial, NextFrame(Raw({'d', 0, 0, 0, 63}), 64));
  EXPECT_FALSE(partial.has_value());
  // A length near 2^32 does not wrap around the limit.
  EXPECT_THAT(NextFrame(Raw({'d', 0xff, 0xff, 0xff, 0xff}), 64),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(NextStartupFrame(Raw({0, 0, 0, 7})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(NextStartupFrame(Raw({0, 0, 0x27, 0x11})),  // 10001 bytes
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(PgwireStartupTest, SslAndCancelRequestsAreKnownByTheirCodes) {
  // SSLRequest: length 8, code 1234 5679.
  const std::string ssl = Raw({0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f});
  ASSERT_OK_AND_ASSIGN(frame, NextStartupFrame(ssl));
  ASSERT_TRUE(frame.has_value());
  ASSERT_OK_AND_ASSIGN(packet, ParseStartupPacket(frame->body));
  EXPECT_TRUE(std::holds_alternative<SslRequest>(packet));
  EXPECT_EQ(EncodeStartupPacket(packet), ssl);
  // CancelRequest: length 16, code 1234 5678, process 7, key -2.
  const std::string cancel = Raw({0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0,
                                  7, 0xff, 0xff, 0xff, 0xfe});
  ASSERT_OK_AND_ASSIGN(cancel_frame, NextStartupFrame(cancel));
  ASSERT_OK_AND_ASSIGN(cancel_packet, ParseStartupPacket(cancel_frame->body));
  ASSERT_TRUE(std::holds_alternative<CancelRequest>(cancel_packet));
  EXPECT_EQ(std::get<CancelRequest>(cancel_packet).process_id, 7);
  EXPECT_EQ(std::get<CancelRequest>(cancel_packet).secret_key, -2);
  EXPECT_EQ(EncodeStartupPacket(cancel_packet), cancel);
  EXPECT_THAT(ParseStartupPacket(cancel_frame->body.substr(0, 8)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PgwireStartupTest, AStartupMessageKeepsItsParametersInOrder) {
  std::string body = Raw({0, 3, 0, 0});
  body += std::string("user\0alice\0database\0jobs\0options\0-c x=1\0\0", 41);
  ASSERT_OK_AND_ASSIGN(packet, ParseStartupPacket(body));
  const auto& m = std::get<StartupMessage>(packet);
  EXPECT_EQ(m.protocol_version, kProtocolVersion3);
  EXPECT_THAT(m.parameters,
              ElementsAre(Pair("user", "alice"), Pair("database", "jobs"),
                          Pair("options", "-c x=1")));
  ASSERT_NE(m.Find("database"), nullptr);
  EXPECT_EQ(*m.Find("database"), "jobs");
  EXPECT_EQ(m.Find("application_name"), nullptr);
  EXPECT_EQ(EncodeStartupPacket(packet),
            Raw({0, 0, 0, static_cast<int>(4 + body.size())}) + body);
}

TEST(PgwireStartupTest, MalformedStartupMessagesAreRefusedWithTheirFault) {
  auto parse = [](absl::string_view params) {
    return ParseStartupPacket(Raw({0, 3, 0, 0}) + std::string(params));
  };
  EXPECT_THAT(parse(std::string("user\0a\0user\0b\0\0", 15)).status().message(),
              HasSubstr("sent twice"));
  EXPECT_THAT(parse(std::string("database\0x\0\0", 12)).status().message(),
              HasSubstr("no user"));
  EXPECT_THAT(parse(std::string("user\0a\0", 7)).status().message(),
              HasSubstr("does not end with an empty name"));
  EXPECT_THAT(parse(std::string("user\0a", 6)).status().message(),
              HasSubstr("no terminating NUL"));
  EXPECT_THAT(parse(std::string("user\0a\0\0x", 9)).status().message(),
              HasSubstr("after its last field"));
  absl::StatusOr<StartupPacket> v2 =
      ParseStartupPacket(Raw({0, 2, 0, 0}) + std::string("user\0a\0\0", 8));
  EXPECT_THAT(v2, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(v2.status().message(), HasSubstr("protocol 2.0"));
}

TEST(PgwireStartupTest, OptionsAreSplitAsPostgresSplitsThem) {
  ASSERT_OK_AND_ASSIGN(
      options, ParseStartupOptions(
                   "  -c fencegate.domain=jobs\t-cfencegate.token=7 "
                   "--statement-timeout=5s -c application_name=a\\ b\\\\c"));
  EXPECT_THAT(options,
              ElementsAre(StartupOption{"fencegate.domain", "jobs"},
                          StartupOption{"fencegate.token", "7"},
                          StartupOption{"statement_timeout", "5s"},
                          StartupOption{"application_name", "a b\\c"}));
  ASSERT_OK_AND_ASSIGN(again,
                       ParseStartupOptions(EncodeStartupOptions(options)));
  EXPECT_EQ(again, options);
  ASSERT_OK_AND_ASSIGN(none, ParseStartupOptions(" "));
  EXPECT_TRUE(none.empty());
  for (const char* bad : {"-B 100", "-c", "-c name", "--=1", "plain"}) {
    EXPECT_THAT(ParseStartupOptions(bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

TEST(PgwireFrontendTest, ExtendedProtocolMessagesParseAndWriteBack) {
  // Parse "s1", "SELECT $1", one parameter of type int4 (23).
  const std::string parse = Raw({'P', 0, 0, 0, 23}) + std::string("s1\0", 3) +
                            std::string("SELECT $1\0", 10) +
                            Raw({0, 1, 0, 0, 0, 23});
  ASSERT_OK_AND_ASSIGN(p, ParseFrontend(parse));
  ASSERT_TRUE(std::holds_alternative<Parse>(p));
  EXPECT_EQ(std::get<Parse>(p).statement, "s1");
  EXPECT_EQ(std::get<Parse>(p).sql, "SELECT $1");
  EXPECT_THAT(std::get<Parse>(p).parameter_types, ElementsAre(23u));
  EXPECT_EQ(Encode(p), parse);
  // Bind portal "" to "s1": formats (binary, text), values ("\x01", NULL),
  // one result format (binary) for all columns.
  const std::string bind = Raw({'B', 0, 0, 0, 29, 0}) + std::string("s1\0", 3) +
                           Raw({0, 2, 0, 1, 0, 0}) +
                           Raw({0, 2, 0, 0, 0, 1, 1, 0xff, 0xff, 0xff, 0xff}) +
                           Raw({0, 1, 0, 1});
  ASSERT_OK_AND_ASSIGN(b, ParseFrontend(bind));
  const Bind& bound = std::get<Bind>(b);
  EXPECT_EQ(bound.portal, "");
  EXPECT_EQ(bound.statement, "s1");
  EXPECT_THAT(bound.parameter_formats, ElementsAre(1, 0));
  ASSERT_EQ(bound.parameters.size(), 2u);
  EXPECT_EQ(bound.parameters[0], absl::string_view("\x01", 1));
  EXPECT_FALSE(bound.parameters[1].has_value());
  EXPECT_THAT(bound.result_formats, ElementsAre(1));
  EXPECT_EQ(Encode(b), bind);
  for (const FrontendMessage& m :
       {FrontendMessage(Describe{Target::kPortal, "p"}),
        FrontendMessage(Execute{"p", 10}), FrontendMessage(Sync{}),
        FrontendMessage(Close{Target::kStatement, "s1"}),
        FrontendMessage(Flush{}), FrontendMessage(Terminate{}),
        FrontendMessage(CopyData{absl::string_view("a\tb\n")}),
        FrontendMessage(CopyDone{}), FrontendMessage(CopyFail{"gave up"}),
        FrontendMessage(Query{"BEGIN; SELECT 1"})}) {
    const std::string bytes = Encode(m);
    ASSERT_OK_AND_ASSIGN(back, ParseFrontend(bytes));
    EXPECT_EQ(back.index(), m.index());
    EXPECT_EQ(Encode(back), bytes);
  }
}

TEST(PgwireFrontendTest, MalformedMessagesNameTheMessageAndTheField) {
  auto fault = [](std::string bytes) {
    absl::StatusOr<FrontendMessage> m = ParseFrontend(bytes);
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument));
    return std::string(m.status().message());
  };
  auto bind = [](absl::string_view body) {
    return MessageBuilder('B').Bytes(body).Finish();
  };
  // Two formats for one parameter.
  EXPECT_THAT(fault(bind(std::string("\0\0", 2) + Raw({0, 2, 0, 0, 0, 0}) +
                         Raw({0, 1, 0, 0, 0, 0}) + Raw({0, 0}))),
              HasSubstr("malformed Bind message: it has 2 parameter formats "
                        "for 1 parameters"));
  // Format code 2.
  EXPECT_THAT(fault(bind(std::string("\0\0", 2) + Raw({0, 1, 0, 2, 0, 0}) +
                         Raw({0, 0}))),
              HasSubstr("parameter format 1 is 2"));
  // A value length of -2, and one running past the end.
  EXPECT_THAT(fault(bind(std::string("\0\0", 2) + Raw({0, 0, 0, 1}) +
                         Raw({0xff, 0xff, 0xff, 0xfe, 0, 0}))),
              HasSubstr("parameter 1's length is -2"));
  EXPECT_THAT(fault(bind(std::string("\0\0", 2) + Raw({0, 0, 0, 1}) +
                         Raw({0, 0, 0, 9, 1, 2}))),
              HasSubstr("parameter 1's value runs past the message's end"));
  EXPECT_THAT(fault(MessageBuilder('Q').Bytes("SELECT 1").Finish()),
              HasSubstr("malformed Query message: its query string has no "
                        "terminating NUL"));
  EXPECT_THAT(
      fault(MessageBuilder('S').Byte('x').Finish()),
      HasSubstr("malformed Sync message: 1 bytes after its last field"));
  EXPECT_THAT(fault(MessageBuilder('D').Byte('X').CString("p").Finish()),
              HasSubstr("neither 'S' (statement) nor 'P' (portal)"));
  EXPECT_THAT(fault(MessageBuilder('F').Int32(0).Finish()),
              HasSubstr("FunctionCall"));
  EXPECT_THAT(fault(MessageBuilder('z').Finish()),
              HasSubstr("unknown frontend message type 122"));
}

TEST(PgwireFrontendTest, SaslInitialResponseIsReadFromAPasswordMessage) {
  const std::string bytes = MessageBuilder('p')
                                .CString("SCRAM-SHA-256")
                                .Int32(5)
                                .Bytes("n,,n=")
                                .Finish();
  ASSERT_OK_AND_ASSIGN(m, ParseFrontend(bytes));
  ASSERT_OK_AND_ASSIGN(sasl,
                       ParseSaslInitialResponse(std::get<PasswordMessage>(m)));
  EXPECT_EQ(sasl.mechanism, "SCRAM-SHA-256");
  EXPECT_EQ(sasl.data, "n,,n=");
  EXPECT_THAT(ParseSaslInitialResponse(PasswordMessage{
                  absl::string_view("SCRAM\0\0\0\0\x09xy", 12)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PgwireBackendTest, ReadyForQueryCarriesTheTransactionStatus) {
  ASSERT_OK_AND_ASSIGN(idle, ParseBackend(Raw({'Z', 0, 0, 0, 5, 'I'})));
  EXPECT_EQ(std::get<ReadyForQuery>(idle).status, TransactionStatus::kIdle);
  ASSERT_OK_AND_ASSIGN(in_tx, ParseBackend(Raw({'Z', 0, 0, 0, 5, 'T'})));
  EXPECT_EQ(std::get<ReadyForQuery>(in_tx).status,
            TransactionStatus::kInTransaction);
  ASSERT_OK_AND_ASSIGN(failed, ParseBackend(Raw({'Z', 0, 0, 0, 5, 'E'})));
  EXPECT_EQ(std::get<ReadyForQuery>(failed).status, TransactionStatus::kFailed);
  EXPECT_EQ(Encode(failed), Raw({'Z', 0, 0, 0, 5, 'E'}));
  EXPECT_THAT(ParseBackend(Raw({'Z', 0, 0, 0, 5, 'X'})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PgwireBackendTest, AnErrorsFieldsAreFoundByCode) {
  const std::string error =
      EncodeError("ERROR", "40001", "stale token", "domain jobs is at 9");
  ASSERT_OK_AND_ASSIGN(m, ParseBackend(error));
  const auto& e = std::get<ErrorResponse>(m);
  ASSERT_NE(e.Find('C'), nullptr);
  EXPECT_EQ(*e.Find('C'), "40001");
  EXPECT_EQ(*e.Find('M'), "stale token");
  EXPECT_EQ(*e.Find('D'), "domain jobs is at 9");
  EXPECT_EQ(*e.Find('S'), "ERROR");
  EXPECT_EQ(e.Find('H'), nullptr);
  EXPECT_EQ(Encode(m), error);
  // The fields must end with a zero byte.
  EXPECT_THAT(ParseBackend(MessageBuilder('E').Byte('C').CString("1").Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PgwireBackendTest, RowsAndOtherServerMessagesParseAndWriteBack) {
  RowDescription columns;
  columns.columns.push_back(Column{"fencegate.token", 0, 0, 25, -1, -1, 0});
  for (const BackendMessage& m :
       {BackendMessage(columns),
        BackendMessage(DataRow{{absl::string_view("7"), std::nullopt}}),
        BackendMessage(CommandComplete{"SHOW"}),
        BackendMessage(
            Authentication{10, absl::string_view("SCRAM-SHA-256\0\0", 15)}),
        BackendMessage(BackendKeyData{42, -7}),
        BackendMessage(ParameterStatus{"server_version", "15.10"}),
        BackendMessage(ParameterDescription{{23, 25}}),
        BackendMessage(CopyResponse{CopyResponse::Direction::kOut, 0, {0, 0}}),
        BackendMessage(CopyData{"x"}), BackendMessage(CopyDone{}),
        BackendMessage(NotificationResponse{9, "jobs", "moved"}),
        BackendMessage(NegotiateProtocolVersion{0, {"_pq_.x"}}),
        BackendMessage(NoticeResponse{{{{'S', "NOTICE"}, {'M', "hi"}}}}),
        BackendMessage(ParseComplete{}), BackendMessage(BindComplete{}),
        BackendMessage(CloseComplete{}), BackendMessage(NoData{}),
        BackendMessage(PortalSuspended{}),
        BackendMessage(EmptyQueryResponse{})}) {
    const std::string bytes = Encode(m);
    ASSERT_OK_AND_ASSIGN(back, ParseBackend(bytes));
    EXPECT_EQ(back.index(), m.index());
    EXPECT_EQ(Encode(back), bytes);
  }
  // DataRow: two columns, "7" and NULL, by hand.
  EXPECT_EQ(
      Encode(BackendMessage(DataRow{{absl::string_view("7"), std::nullopt}})),
      Raw({'D', 0, 0, 0, 15, 0, 2, 0, 0, 0, 1, '7', 0xff, 0xff, 0xff, 0xff}));
  EXPECT_THAT(ParseBackend(MessageBuilder('V').Int32(-1).Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseBackend(MessageBuilder('D').Int16(1).Int32(-3).Finish()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fencegate::pgwire
