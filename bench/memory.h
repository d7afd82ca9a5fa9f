// Copyright fencegate authors.
//
// fencegate-bench memory: the gateway's resident memory as the number of
// fenced domains grows. For each domain-name length, a fresh gateway (no-op
// route) gets one Fence per new domain from 64 concurrent clients; at each
// checkpoint the gateway's VmRSS is read from /proc. Shows that memory stops
// growing once the fence cache and RocksDB's buffers are full
// (docs/benchmarks.md).

#ifndef BENCH_MEMORY_H_
#define BENCH_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace fencegate::bench {

struct MemoryOptions {
  // Total domains fenced at each checkpoint, ascending.
  std::vector<int64_t> checkpoints = {10000, 100000, 250000, 500000, 1000000};
  // Lengths of the domain names, in bytes (at least 8).
  std::vector<int> name_bytes = {12, 500};
  // Directory for the gateways' data.
  std::string work_dir;
  // Extra flags for each gateway.
  std::vector<std::string> gateway_flags;
};

// Prints one table row per checkpoint; returns 0, or 1 if a gateway could
// not be started or a Fence failed.
int RunMemory(const MemoryOptions& options);

}  // namespace fencegate::bench

#endif  // BENCH_MEMORY_H_
