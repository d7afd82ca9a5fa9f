// Copyright fencegate authors.
//
// The harness's command lines, parsed with CLI11 as fencegate's and
// fencectl's are ('-' and '_' are one in flag names; common/flag_args.h).

#ifndef BENCH_FLAGS_H_
#define BENCH_FLAGS_H_

#include <optional>

#include "CLI/CLI.hpp"

namespace fencegate::bench {

// Parses argv[first..argc) into `app` (argv[first - 1] stands for the
// program). Returns nullopt when the program should go on; otherwise its
// exit code, having printed the help (0) or "<app name>: <error>" (2).
std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv, int first);

}  // namespace fencegate::bench

#endif  // BENCH_FLAGS_H_
