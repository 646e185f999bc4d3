// The GPU roofline benchmark behind `strata bench --roofline`. The CUDA backend provides it
// when built with STRATA_WITH_CUDA; otherwise bench_roofline_cpu.cpp fails with a clear error.
#pragma once

namespace strata::cli {

// argv[0] is "bench"; returns the process exit code.
int run_roofline_bench(int argc, char** argv);

}  // namespace strata::cli
