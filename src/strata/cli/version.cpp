// strata version: prints the build's version and backends.
#include <cstdio>

#include "strata/cli/command.h"

namespace {

int run(int, char**) {
#if defined(STRATA_WITH_CUDA)
  std::printf("strata 0.1.0 (cpu, cuda)\n");
#else
  std::printf("strata 0.1.0 (cpu)\n");
#endif
  return 0;
}

const bool kRegistered = strata::cli::register_command({"version", "print the version and backends", run});

}  // namespace
