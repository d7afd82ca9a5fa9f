// Copyright fencegate authors.
//
// Command-line arguments as the project's programs (fencegate, fencectl,
// fencegate-bench) read them with CLI11: '-' and '_' are one in flag names,
// so --put-file is --put_file. Not installed.

#ifndef FENCEGATE_COMMON_FLAG_ARGS_H_
#define FENCEGATE_COMMON_FLAG_ARGS_H_

#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace fencegate {

// argv[1..argc) with each '-' in a flag's name (after the leading "--", up to
// any '=') turned into '_', and "--name=" (an empty value) given as "--name"
// "" so that CLI11 sees the empty value; nothing after a bare "--" is
// changed, since it belongs to a command. Returned last first, the order in
// which CLI::App::parse(std::vector<std::string>&) takes them.
std::vector<std::string> FlagArgsForCli11(int argc, const char* const* argv);

// Parses argv[1..argc) (FlagArgsForCli11) into `app`. Returns nullopt when
// the program should go on; otherwise its exit code, having printed the help
// to stdout (0) or "<app name>: <error> (see --help)" to stderr (2).
std::optional<int> ParseFlags(CLI::App& app, int argc, const char* const* argv);

}  // namespace fencegate

#endif  // FENCEGATE_COMMON_FLAG_ARGS_H_
