// Copyright fencegate authors.

#include "fencegate/common/thread_name.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fencegate {

void NameThisThread(absl::string_view name) {
  const std::string cut(name.substr(0, kMaxThreadName));
  pthread_setname_np(pthread_self(), cut.c_str());
}

namespace {

std::string CommOf(const std::string& path) {
  std::ifstream in(path);
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace

std::vector<pid_t> UnnamedThreads() {
  std::vector<pid_t> unnamed;
  const pid_t self = getpid();
  const std::string main_name = CommOf("/proc/self/comm");
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr || main_name.empty()) {
    if (dir != nullptr) closedir(dir);
    return unnamed;
  }
  while (const dirent* e = readdir(dir)) {
    pid_t tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid) || tid == self) continue;
    if (CommOf(absl::StrCat("/proc/self/task/", tid, "/comm")) == main_name) {
      unnamed.push_back(tid);
    }
  }
  closedir(dir);
  return unnamed;
}

bool NameThread(pid_t tid, absl::string_view name) {
  std::ofstream out(absl::StrCat("/proc/self/task/", tid, "/comm"));
  out << name.substr(0, kMaxThreadName);
  out.flush();
  return out.good();
}

}  // namespace fencegate
