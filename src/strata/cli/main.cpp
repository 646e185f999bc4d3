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

static void usage(FILE* out) {
  std::fprintf(out,
               "usage: strata <command> [options]   (strata <command> --help, strata help <command>)\n"
               "       strata --version\n\ncommands:\n");
  for (const auto& c : strata::cli::commands()) {
    std::fprintf(out, "  %-14s %s\n", c.name.c_str(), c.help.c_str());
  }
}

static const strata::cli::Command* find_command(const char* name) {
  for (const auto& c : strata::cli::commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

static int run_command(const strata::cli::Command& c, int argc, char** argv) {
  try {
    return c.run(argc, argv);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", c.name.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: internal error: %s\n", c.name.c_str(), e.what());
    return 3;
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* first = argv[1];
  if (!std::strcmp(first, "--help") || !std::strcmp(first, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!std::strcmp(first, "--version") || !std::strcmp(first, "-V")) {
    std::printf("%s\n", strata::cli::version_line().c_str());
    return 0;
  }
  if (!std::strcmp(first, "help")) {
    if (argc < 3) {
      usage(stdout);
      return 0;
    }
    const strata::cli::Command* c = find_command(argv[2]);
    if (!c) {
      std::fprintf(stderr, "strata help: unknown command '%s'\n", argv[2]);
      usage(stderr);
      return 2;
    }
    char help_flag[] = "--help";
    char* help_argv[] = {argv[2], help_flag, nullptr};
    return run_command(*c, 2, help_argv);
  }
  if (const strata::cli::Command* c = find_command(first)) return run_command(*c, argc - 1, argv + 1);
  std::fprintf(stderr, "strata: unknown command '%s'\n", first);
  usage(stderr);
  return 2;
}
