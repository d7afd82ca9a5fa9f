// Copyright fencegate authors.
//
// The docs cite the repository's files where they are: every path in
// backquotes that starts with one of the repository's folders (`fencing/`,
// `gateway/`, ...) names a file or folder that exists, or, with a `*`, at
// least one. A file that moves without its docs fails here. Other paths
// (resources such as `files/reports/daily.csv`, `billing/june`) are not
// the repository's and are not checked.

#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fencegate {
namespace {

const std::string kRoot = FENCEGATE_SOURCE_DIR;

// The repository's top-level folders (not the build trees).
std::set<std::string> TopFolders() {
  std::set<std::string> folders;
  DIR* dir = opendir(kRoot.c_str());
  if (dir == nullptr) return folders;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    struct stat st {};
    if (name.empty() || name[0] == '.' || absl::StartsWith(name, "build") ||
        stat(absl::StrCat(kRoot, "/", name).c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
      continue;
    }
    folders.insert(name);
  }
  closedir(dir);
  return folders;
}

bool Exists(const std::string& path) {
  glob_t g{};
  const int rc =
      glob(absl::StrCat(kRoot, "/", path).c_str(), GLOB_NOSORT, nullptr, &g);
  const bool found = rc == 0 && g.gl_pathc > 0;
  globfree(&g);
  return found;
}

// The repository paths `doc` cites.
std::vector<std::string> CitedPaths(const std::string& doc,
                                    const std::set<std::string>& folders) {
  std::ifstream in(absl::StrCat(kRoot, "/", doc));
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  static const std::regex kQuoted(
      "`([A-Za-z0-9_.\\-]+(/[A-Za-z0-9_.\\-*]*)+)`");
  std::vector<std::string> paths;
  for (std::sregex_iterator it(s.begin(), s.end(), kQuoted), end; it != end;
       ++it) {
    const std::string path = (*it)[1];
    const std::string first = path.substr(0, path.find('/'));
    if (folders.count(first) != 0) paths.push_back(path);
  }
  return paths;
}

TEST(DocsPathsTest, EveryCitedFileExists) {
  const std::set<std::string> folders = TopFolders();
  ASSERT_GT(folders.count("fencing"), 0u) << "not the repository: " << kRoot;
  std::vector<std::string> docs = {"README.md"};
  glob_t g{};
  ASSERT_EQ(glob(absl::StrCat(kRoot, "/docs/*.md").c_str(), 0, nullptr, &g), 0);
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    docs.push_back(std::string(g.gl_pathv[i]).substr(kRoot.size() + 1));
  }
  globfree(&g);
  size_t checked = 0;
  for (const std::string& doc : docs) {
    for (const std::string& path : CitedPaths(doc, folders)) {
      ++checked;
      EXPECT_TRUE(Exists(path))
          << doc << " cites " << path << ", which does not exist";
    }
  }
  // docs/architecture.md alone cites about seventy.
  EXPECT_GT(checked, 100u);
}

}  // namespace
}  // namespace fencegate
