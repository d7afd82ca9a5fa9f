// Copyright fencegate authors.

#include "fencegate/common/flag_args.h"

#include <algorithm>
#include <iostream>

namespace fencegate {

std::vector<std::string> FlagArgsForCli11(int argc, const char* const* argv) {
  std::vector<std::string> args;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") flags_ended = true;
    if (flags_ended || arg.size() < 3 || arg[0] != '-' || arg[1] != '-') {
      args.push_back(std::move(arg));
      continue;
    }
    const size_t eq = arg.find('=');
    const size_t end = std::min(eq, arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<long>(end), '-',
                 '_');
    if (eq == arg.size() - 1) {
      // CLI11 2.1 takes "--name=" for a missing value; "--name" "" is the
      // empty one that was meant.
      arg.pop_back();
      args.push_back(std::move(arg));
      args.emplace_back();
      continue;
    }
    args.push_back(std::move(arg));
  }
  std::reverse(args.begin(), args.end());
  return args;
}

std::optional<int> ParseFlags(CLI::App& app, int argc,
                              const char* const* argv) {
  std::vector<std::string> args = FlagArgsForCli11(argc, argv);
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << " (see --help)\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace fencegate
