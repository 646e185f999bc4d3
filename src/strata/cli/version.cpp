// strata version (also strata --version): prints the build's version and backends.
#include <cstdio>

#include "strata/cli/command.h"

namespace strata::cli {

std::string version_line() {
#if defined(STRATA_WITH_CUDA)
  return "strata 0.1.0 (cpu, cuda)";
#else
  return "strata 0.1.0 (cpu)";
#endif
}

namespace {

int run(int, char**) {
  std::printf("%s\n", version_line().c_str());
  return 0;
}

const bool kRegistered = register_command({"version", "print the version and backends", run});

}  // namespace
}  // namespace strata::cli
