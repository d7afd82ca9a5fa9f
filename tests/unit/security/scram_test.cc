// Copyright fencegate authors.
//
// The server's side of SCRAM-SHA-256 (security/scram.h), checked against
// the exchange in RFC 7677, section 3 (user "user", password "pencil"), and
// the user file that holds the verifiers (security/user_file.h).

#include "security/scram.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "security/user_file.h"
#include "tests/test_util.h"

namespace fencegate {
namespace {

using ::fencegate::testing::ExpectError;
using ::fencegate::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kSaltBase64[] = "W22ZaJ0SNY7soEsUEjb6gQ==";
constexpr char kClientFirst[] = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
constexpr char kServerNonce[] = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
constexpr char kServerFirst[] =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
constexpr char kClientFinal[] =
    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
constexpr char kServerFinal[] =
    "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

ScramVerifier Pencil() {
  std::string salt;
  EXPECT_TRUE(absl::Base64Unescape(kSaltBase64, &salt));
  absl::StatusOr<ScramVerifier> v =
      ParseScramVerifier(MakeScramVerifier("pencil", salt, 4096));
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : ScramVerifier{};
}

TEST(ScramTest, TheRfcExchangeSucceeds) {
  ScramServer server(Pencil(), kServerNonce);
  ASSERT_OK_AND_ASSIGN(first, server.Start(kClientFirst));
  EXPECT_EQ(first, kServerFirst);
  ASSERT_OK_AND_ASSIGN(final, server.Finish(kClientFinal));
  EXPECT_EQ(final, kServerFinal);
}

TEST(ScramTest, AWrongPasswordIsPermissionDenied) {
  std::string salt;
  ASSERT_TRUE(absl::Base64Unescape(kSaltBase64, &salt));
  ASSERT_OK_AND_ASSIGN(
      other, ParseScramVerifier(MakeScramVerifier("pencil2", salt, 4096)));
  ScramServer server(other, kServerNonce);
  ASSERT_OK(server.Start(kClientFirst).status());
  EXPECT_THAT(server.Finish(kClientFinal),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(ScramTest, AnExchangeThatDoesNotFollowTheFirstIsRefused) {
  {
    ScramServer server(Pencil(), kServerNonce);
    EXPECT_THAT(server.Finish(kClientFinal),
                StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  auto finish = [](absl::string_view client_final) {
    ScramServer server(Pencil(), kServerNonce);
    EXPECT_TRUE(server.Start(kClientFirst).ok());
    return server.Finish(client_final);
  };
  // Another nonce, another channel-binding header, a short proof.
  EXPECT_THAT(finish("c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9"
                     "zjfMHgsqmmiz7AndVQ=")
                  .status()
                  .message(),
              HasSubstr("nonce"));
  EXPECT_THAT(finish("c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)"
                     "hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
                  .status()
                  .message(),
              HasSubstr("channel-binding header"));
  EXPECT_THAT(
      finish(
          "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AA=="),
      StatusIs(absl::StatusCode::kInvalidArgument));
  for (const char* first :
       {"p=tls-server-end-point,,n=,r=abc", "n,a=admin,n=,r=abc",
        "n,,n=,r=abc,m=ext", "n,,n=", "x,,n=,r=abc", "n,,n=,r="}) {
    ScramServer server(Pencil(), kServerNonce);
    EXPECT_THAT(server.Start(first),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << first;
  }
}

TEST(ScramTest, TheClientSignsInToTheServerAndChecksItsSignature) {
  ScramServer server(Pencil(), "server-nonce-1");
  ScramClient client("pencil", "client-nonce-1");
  ASSERT_OK_AND_ASSIGN(server_first, server.Start(client.First()));
  ASSERT_OK_AND_ASSIGN(client_final, client.Final(server_first));
  ASSERT_OK_AND_ASSIGN(server_final, server.Finish(client_final));
  EXPECT_OK(client.Verify(server_final));
  // A server that did not know the verifier cannot sign.
  EXPECT_THAT(client.Verify("v=AAAA"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ExpectError(client.Verify("e=invalid-proof"),
              absl::StatusCode::kPermissionDenied, "invalid-proof");
}

TEST(ScramTest, TheClientsWrongPasswordIsRefusedByTheServer) {
  ScramServer server(Pencil(), "server-nonce-2");
  ScramClient client("crayon", "client-nonce-2");
  ASSERT_OK_AND_ASSIGN(server_first, server.Start(client.First()));
  ASSERT_OK_AND_ASSIGN(client_final, client.Final(server_first));
  EXPECT_THAT(server.Finish(client_final),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(ScramTest, TheClientRefusesAServerFirstThatDoesNotFollowItsOwn) {
  ScramClient client("pencil", "abc");
  client.First();
  ExpectError(client.Final("r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
              absl::StatusCode::kInvalidArgument, "nonce");
  ExpectError(client.Final("r=abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
              absl::StatusCode::kInvalidArgument, "nonce");
  ExpectError(client.Final("r=abcd,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=0"),
              absl::StatusCode::kInvalidArgument, "iteration");
  ExpectError(client.Final("r=abcd,s=!!,i=4096"),
              absl::StatusCode::kInvalidArgument, "salt");
}

TEST(ScramTest, VerifiersAreReadInPostgresFormat) {
  // The RFC's password as PostgreSQL would store it with the RFC's salt.
  ASSERT_OK_AND_ASSIGN(
      v, ParseScramVerifier("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"
                            "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
                            "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="));
  EXPECT_EQ(v.iterations, 4096);
  EXPECT_EQ(v.stored_key, Pencil().stored_key);
  EXPECT_EQ(v.server_key, Pencil().server_key);
  for (const char* bad :
       {"pencil", "md5a3556571e93b0d20722ba62be61e8c2d",
        "SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$a:b",
        "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$AAAA:AAAA",
        "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==",
        "SCRAM-SHA-256$4096:!!$AAAA:AAAA"}) {
    EXPECT_THAT(ParseScramVerifier(bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

constexpr char kPencilVerifier[] =
    "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"
    "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:"
    "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";

TEST(UserFileTest, UsersAreReadInPgbouncersFormat) {
  const std::string text =
      absl::StrCat("; workers\n\n\"user\" \"", kPencilVerifier,
                   "\"\n  # the reporting job\n\"re\"\"port\"  \"",
                   kPencilVerifier, "\"  \n");
  ASSERT_OK_AND_ASSIGN(file, UserFile::Parse(text, "users.txt"));
  EXPECT_EQ(file.size(), 2u);
  ASSERT_NE(file.Find("user"), nullptr);
  EXPECT_EQ(file.Find("user")->stored_key, Pencil().stored_key);
  EXPECT_NE(file.Find("re\"port"), nullptr);
  EXPECT_EQ(file.Find("nobody"), nullptr);
  // What the file names signs in: the RFC exchange with its verifier.
  ScramServer server(*file.Find("user"), kServerNonce);
  ASSERT_OK(server.Start(kClientFirst).status());
  ASSERT_OK_AND_ASSIGN(final, server.Finish(kClientFinal));
  EXPECT_EQ(final, kServerFinal);
}

TEST(UserFileTest, AFaultyLineIsNamed) {
  const std::string good = absl::StrCat("\"a\" \"", kPencilVerifier, "\"\n");
  struct Case {
    std::string text;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {good + "\"b\" \"pencil\"", "users.txt:2: user \"b\""},
           {good + good, "users.txt:2: user \"a\" is listed twice"},
           {good + "b \"x\"", "users.txt:2: expected a field in double quotes"},
           {"\"a\" \"x", "users.txt:1: a field's closing quote is missing"},
           {"\"a\"", "users.txt:1: expected \"user\" \"verifier\""},
           {absl::StrCat("\"\" \"", kPencilVerifier, "\""),
            "users.txt:1: the user is empty"}}) {
    absl::StatusOr<UserFile> file = UserFile::Parse(c.text, "users.txt");
    EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument)) << c.text;
    EXPECT_THAT(file.status().message(), HasSubstr(c.says)) << c.text;
  }
  EXPECT_THAT(UserFile::Load("/nonexistent/users.txt"),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace fencegate
