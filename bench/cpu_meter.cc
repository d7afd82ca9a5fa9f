// Copyright fencegate authors.

#include "bench/cpu_meter.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace fencegate::bench {
namespace {

// What /proc/<pid>/stat says of one process, in clock ticks.
struct ProcStat {
  pid_t ppid = 0;
  unsigned long long own = 0;       // utime + stime: all its threads.
  unsigned long long children = 0;  // cutime + cstime: reaped children.
};

bool ReadProcStat(pid_t pid, ProcStat* out) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return false;
  // The command name, field 2, is in parentheses and may hold spaces.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<std::string> f =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state); ppid is field 4, utime..cstime fields 14-17.
  if (f.size() < 15) return false;
  unsigned long long utime, stime, cutime, cstime;
  int ppid;
  if (!absl::SimpleAtoi(f[1], &ppid) || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime) || !absl::SimpleAtoi(f[13], &cutime) ||
      !absl::SimpleAtoi(f[14], &cstime)) {
    return false;
  }
  out->ppid = ppid;
  out->own = utime + stime;
  out->children = cutime + cstime;
  return true;
}

// Every process on the machine.
absl::flat_hash_map<pid_t, ProcStat> AllProcesses() {
  absl::flat_hash_map<pid_t, ProcStat> all;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return all;
  while (dirent* e = ::readdir(dir)) {
    int pid;
    ProcStat s;
    if (absl::SimpleAtoi(e->d_name, &pid) && ReadProcStat(pid, &s)) {
      all[pid] = s;
    }
  }
  ::closedir(dir);
  return all;
}

// Context switches of every live thread of `pid`; by thread name into
// `by_thread` if it is not null.
double ThreadSwitches(pid_t pid,
                      std::map<std::string, ProcessUsage::Threads>* by_thread) {
  double total = 0;
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(absl::StrCat(tasks, "/", e->d_name, "/status"));
    std::string line;
    double thread_total = 0;
    while (std::getline(in, line)) {
      // voluntary_ctxt_switches: N, then nonvoluntary_ctxt_switches: N.
      absl::string_view v(line);
      if (!absl::ConsumePrefix(&v, "voluntary_ctxt_switches:") &&
          !absl::ConsumePrefix(&v, "nonvoluntary_ctxt_switches:")) {
        continue;
      }
      unsigned long long n;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &n)) {
        thread_total += n;
      }
    }
    total += thread_total;
    if (by_thread != nullptr) {
      std::ifstream comm(absl::StrCat(tasks, "/", e->d_name, "/comm"));
      std::string name;
      if (std::getline(comm, name)) {
        ProcessUsage::Threads& group = (*by_thread)[name];
        ++group.count;
        group.switches += thread_total;
      }
    }
  }
  ::closedir(dir);
  return total;
}

// What `root`, its live descendants and its reaped children used; unknown
// if `root` is 0 or gone.
ProcessUsage TreeUsage(const absl::flat_hash_map<pid_t, ProcStat>& all,
                       pid_t root, bool by_thread = false) {
  if (root == 0 || !all.contains(root)) return {};
  absl::flat_hash_map<pid_t, std::vector<pid_t>> children;
  for (const auto& [pid, s] : all) children[s.ppid].push_back(pid);
  unsigned long long ticks = all.at(root).children;
  double switches = 0;
  std::map<std::string, ProcessUsage::Threads> threads;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    pid_t pid = todo.back();
    todo.pop_back();
    ticks += all.at(pid).own;
    switches += ThreadSwitches(pid, by_thread ? &threads : nullptr);
    auto it = children.find(pid);
    if (it != children.end()) {
      todo.insert(todo.end(), it->second.begin(), it->second.end());
    }
  }
  return {static_cast<double>(ticks) / ::sysconf(_SC_CLK_TCK), switches,
          std::move(threads)};
}

}  // namespace

CpuTimes operator-(const CpuTimes& later, const CpuTimes& earlier) {
  auto diff = [](const ProcessUsage& a, const ProcessUsage& b) {
    ProcessUsage d;
    if (a.cpu_s >= 0 && b.cpu_s >= 0) d.cpu_s = a.cpu_s - b.cpu_s;
    if (a.switches >= 0 && b.switches >= 0)
      d.switches = a.switches - b.switches;
    // Threads alive at both samples; one started or ended between them is
    // left out.
    for (const auto& [name, group] : a.by_thread) {
      auto it = b.by_thread.find(name);
      if (it == b.by_thread.end() || it->second.count != group.count) continue;
      d.by_thread[name] = {group.count, group.switches - it->second.switches};
    }
    return d;
  };
  CpuTimes d;
  d.harness = diff(later.harness, earlier.harness);
  d.gateway = diff(later.gateway, earlier.gateway);
  d.postgres = diff(later.postgres, earlier.postgres);
  d.pgbouncer = diff(later.pgbouncer, earlier.pgbouncer);
  d.machine_total = later.machine_total - earlier.machine_total;
  // Each figure is a tick count divided by the tick rate, so the two
  // differences of an interval with no idle tick can round apart by an ulp;
  // and the kernel's iowait count may step back (proc(5)). Busy time is
  // part of the total, so it is held to it.
  d.machine_busy = std::clamp(later.machine_busy - earlier.machine_busy, 0.0,
                              std::max(d.machine_total, 0.0));
  return d;
}

CpuMeter::CpuMeter(pid_t gateway, pid_t postmaster, pid_t pgbouncer)
    : gateway_(gateway), postmaster_(postmaster), pgbouncer_(pgbouncer) {}

CpuTimes CpuMeter::Sample() const {
  const absl::flat_hash_map<pid_t, ProcStat> all = AllProcesses();
  CpuTimes t;
  const double tick = ::sysconf(_SC_CLK_TCK);
  ProcStat self;
  if (ReadProcStat(::getpid(), &self)) {
    t.harness = {self.own / tick, ThreadSwitches(::getpid(), nullptr), {}};
  }
  t.gateway = TreeUsage(all, gateway_, /*by_thread=*/true);
  t.postgres = TreeUsage(all, postmaster_);
  t.pgbouncer = TreeUsage(all, pgbouncer_);
  // First line of /proc/stat: cpu user nice system idle iowait irq softirq
  // steal (guest time is already counted in user).
  std::ifstream in("/proc/stat");
  std::string cpu;
  unsigned long long v[8] = {};
  in >> cpu;
  for (unsigned long long& x : v) in >> x;
  unsigned long long total = 0;
  for (unsigned long long x : v) total += x;
  t.machine_total = total / tick;
  t.machine_busy = (total - v[3] - v[4]) / tick;
  return t;
}

}  // namespace fencegate::bench
