// Copyright fencegate authors.

#include "bench/flags.h"

#include <iostream>
#include <string>
#include <vector>

#include "fencegate/common/flag_args.h"

namespace fencegate::bench {

std::optional<int> ParseFlags(CLI::App& app, int argc, char** argv, int first) {
  std::vector<std::string> args =
      FlagArgsForCli11(argc - first + 1, argv + first - 1);
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

}  // namespace fencegate::bench
