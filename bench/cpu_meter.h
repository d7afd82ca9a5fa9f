// Copyright fencegate authors.
//
// CpuMeter: the CPU time and context switches of the processes of a run,
// read from /proc, so that a run reports what a write costs in CPU as well
// as in time. On a machine whose cores the harness, the gateway and
// PostgreSQL share, a saturated run's throughput is the cores' time divided
// by the CPU time of one write, so this is what the ratios between targets
// come down to.

#ifndef BENCH_CPU_METER_H_
#define BENCH_CPU_METER_H_

#include <sys/types.h>

#include <map>
#include <string>

namespace fencegate::bench {

// What one process (with its descendants) used. Negative when the process
// is not known (e.g. a PostgreSQL given by --pg_dsn) or has exited.
struct ProcessUsage {
  // CPU seconds, user and system.
  double cpu_s = -1;
  // Context switches, voluntary (blocking, e.g. to wait for a wake-up) and
  // not, of the threads alive when sampled.
  double switches = -1;
  // The gateway's only: context switches and live threads by thread name
  // (/proc/<pid>/task/<tid>/comm).
  struct Threads {
    int count = 0;
    double switches = 0;
  };
  std::map<std::string, Threads> by_thread;
};

// Totals since each process started, or since boot for the machine.
struct CpuTimes {
  ProcessUsage harness;  // This process, without its children.
  ProcessUsage gateway;
  ProcessUsage postgres;  // The postmaster and every backend.
  ProcessUsage pgbouncer;
  double machine_busy = 0;   // CPU seconds, all cores: not idle or iowait.
  double machine_total = 0;  // CPU seconds, all cores: busy, idle, iowait.
};

// `later - earlier`, field by field; a field unknown in either is unknown.
// The machine's busy time is held within [0, its total time].
CpuTimes operator-(const CpuTimes& later, const CpuTimes& earlier);

// Thread safety: Sample() may be called from any thread.
class CpuMeter {
 public:
  // A pid of 0 leaves that process unmeasured.
  CpuMeter(pid_t gateway, pid_t postmaster, pid_t pgbouncer);

  // Reads /proc. A process's CPU time includes its live descendants (a
  // PostgreSQL backend per connection) and the children it has reaped; its
  // switches are those of the live threads of it and its descendants.
  CpuTimes Sample() const;

 private:
  const pid_t gateway_;
  const pid_t postmaster_;
  const pid_t pgbouncer_;
};

}  // namespace fencegate::bench

#endif  // BENCH_CPU_METER_H_
