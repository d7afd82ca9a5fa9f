// Copyright fencegate authors.
//
// The one SQLSTATE table (postgres/include/postgres/sqlstates.h): each code
// once, each with one meaning, and each in the docs' table of where it
// comes from -- the fence schema's in docs/postgres.md, the PostgreSQL
// port's in docs/pgwire.md -- whose rows are all in the table.

#include "postgres/sqlstates.h"

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fencegate::postgres {
namespace {

// The codes in the first column of the table under `heading` in `doc`.
std::set<std::string> DocumentedCodes(const std::string& doc,
                                      const std::string& heading) {
  std::ifstream in(absl::StrCat(FENCEGATE_SOURCE_DIR, "/", doc));
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t start = s.find(heading);
  if (start == std::string::npos) return {};
  const size_t end = s.find("\n#", start + heading.size());
  const std::string section = s.substr(start, end - start);
  static const std::regex kRow("\\n\\| ([0-9A-Z]{5}) \\|");
  std::set<std::string> codes;
  for (std::sregex_iterator it(section.begin(), section.end(), kRow), e;
       it != e; ++it) {
    codes.insert((*it)[1]);
  }
  return codes;
}

TEST(SqlStatesTest, EachCodeOnceAndInItsDocsTable) {
  const std::set<std::string> database = DocumentedCodes(
      "docs/postgres.md", "### SQLSTATEs the fence schema raises");
  const std::set<std::string> port =
      DocumentedCodes("docs/pgwire.md", "## SQLSTATEs of the port");
  ASSERT_FALSE(database.empty());
  ASSERT_FALSE(port.empty());
  std::set<std::string> codes;
  std::set<std::string> from_database;
  std::set<std::string> from_port;
  for (const SqlStateEntry& e : kSqlStates) {
    const std::string code = e.code;
    EXPECT_TRUE(std::regex_match(code, std::regex("[0-9A-Z]{5}"))) << code;
    EXPECT_TRUE(codes.insert(code).second) << code << " is listed twice";
    if (e.origin != SqlStateOrigin::kPort) from_database.insert(code);
    if (e.origin != SqlStateOrigin::kDatabase) from_port.insert(code);
  }
  EXPECT_EQ(from_database, database)
      << "docs/postgres.md's table and sqlstates.h differ";
  EXPECT_EQ(from_port, port) << "docs/pgwire.md's table and sqlstates.h differ";
}

}  // namespace
}  // namespace fencegate::postgres
