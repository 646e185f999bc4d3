// The default roofline benchmark for builds without CUDA.
#include "strata/cli/bench_roofline.h"

#include "strata/core/error.h"

namespace strata::cli {

#if !defined(STRATA_WITH_CUDA)
int run_roofline_bench(int, char**) {
  fail("--roofline: the roofline benchmark needs the CUDA backend (this build has none)");
}
#endif

}  // namespace strata::cli
