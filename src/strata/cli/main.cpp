// strata: the command-line entry point. Dispatches to the registered subcommands.
#include <cstdio>
#include <cstring>
#include <exception>

#include "strata/cli/command.h"
#include "strata/core/error.h"

namespace strata::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

}  // namespace strata::cli

static void usage() {
  std::fprintf(stderr, "usage: strata <command> [options]   (strata <command> --help)\n\ncommands:\n");
  for (const auto& c : strata::cli::commands()) {
    std::fprintf(stderr, "  %-14s %s\n", c.name.c_str(), c.help.c_str());
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : strata::cli::commands()) {
    if (c.name == argv[1]) {
      try {
        return c.run(argc - 1, argv + 1);
      } catch (const strata::Error& e) {
        std::fprintf(stderr, "strata %s: error: %s\n", argv[1], e.what());
        return 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata %s: internal error: %s\n", argv[1], e.what());
        return 3;
      }
    }
  }
  std::fprintf(stderr, "strata: unknown command '%s'\n", argv[1]);
  usage();
  return 2;
}
