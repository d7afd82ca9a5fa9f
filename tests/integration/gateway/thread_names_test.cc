// Copyright fencegate authors.
//
// Every thread the gateway starts has a name of its own (common/
// thread_name.h, docs/operations.md "Threads"): a gateway serving a
// PostgreSQL route, its PostgreSQL port and a file route, after a port
// session has run, shows no thread but its main one under the program's
// name in /proc/<pid>/task/<tid>/comm -- the name a thread inherits when
// nobody names it. And every name shows in docs/architecture.md's thread
// census ("Threads"), so that the census cannot fall behind the code.

#include <dirent.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/pg_port_fixture.h"

namespace fencegate {
namespace {

// Each thread of `pid`, by its id, with its name.
std::map<std::string, std::string> ThreadNames(pid_t pid) {
  std::map<std::string, std::string> names;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return names;
  while (const dirent* e = readdir(dir)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == "..") continue;
    std::ifstream comm(absl::StrCat(tasks, "/", tid, "/comm"));
    std::string name;
    std::getline(comm, name);
    names[tid] = std::string(absl::StripAsciiWhitespace(name));
  }
  closedir(dir);
  return names;
}

// The "## Threads" section of docs/architecture.md.
std::string ThreadCensus() {
  std::ifstream in(FENCEGATE_SOURCE_DIR "/docs/architecture.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("\n## Threads\n");
  if (start == std::string::npos) return "";
  const size_t end = doc.find("\n## ", start + 1);
  return doc.substr(start, end == std::string::npos ? end : end - start);
}

// A thread's name as the census writes it: without a pool member's number
// ("fg-io3" is `fg-io`).
std::string CensusName(absl::string_view name) {
  while (!name.empty() && absl::ascii_isdigit(name.back())) {
    name.remove_suffix(1);
  }
  return std::string(name);
}

class ThreadNamesTest : public PgPortTest {};

TEST_F(ThreadNamesTest, EveryThreadTheGatewayStartsIsNamed) {
  testing::TempDir files;
  auto g = StartGateway(
      {"--route=files=file://" + files.path(), "--metrics_listen=127.0.0.1:0"});
  ASSERT_NE(g, nullptr);
  std::string out, err;
  ASSERT_EQ(Psql(*g, Options(5), {"UPDATE jobs SET owner = 't5' WHERE id = 1"},
                 &out, &err),
            0)
      << err;
  const pid_t pid = g->process->pid();
  const std::map<std::string, std::string> names = ThreadNames(pid);
  ASSERT_GT(names.size(), 10u);  // Read whole: the gateway has many.
  const std::string program = names.at(absl::StrCat(pid));
  for (const auto& [tid, name] : names) {
    if (tid == absl::StrCat(pid)) continue;
    EXPECT_NE(name, program) << "thread " << tid << " has no name of its own";
  }
  const std::string census = ThreadCensus();
  ASSERT_FALSE(census.empty()) << "docs/architecture.md has no Threads section";
  for (const auto& [tid, name] : names) {
    if (tid == absl::StrCat(pid)) continue;
    EXPECT_TRUE(absl::StrContains(census, absl::StrCat("`", CensusName(name))))
        << "thread " << name
        << " is missing from docs/architecture.md's thread census";
  }
}

}  // namespace
}  // namespace fencegate
