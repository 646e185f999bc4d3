// Subcommands of the strata binary. Each command file registers itself:
//   static const bool kRegistered = register_command({"logits", "write logits as .npy", run});
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

struct Command {
  std::string name;
  std::string help;
  // argv[0] is the command name; returns the process exit code.
  std::function<int(int argc, char** argv)> run;
};

bool register_command(Command command);
const std::vector<Command>& commands();

// "strata 0.1.0 (cpu, cuda)": the version and the backends built in (strata --version).
std::string version_line();

}  // namespace strata::cli
