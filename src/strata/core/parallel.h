// Data-parallel loops on the CPU (OpenMP when available).
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace strata {

// Calls f(i) for i in [0, n), spread over the CPU cores. f must be safe to run concurrently.
//
// The team size follows the machine's load (OpenMP dynamic adjustment, set once per calling
// thread: the setting is per thread). With a fixed team on a busy machine, every one of a
// forward's many short loops waits at its barrier for a descheduled thread: measured on a
// loaded 2-core machine, a tiny-model bench took 8.2 s with 2 threads against 0.03 s with
// dynamic adjustment. Results do not depend on the team size (see docs/ARCHITECTURE.md).
template <class F>
void parallel_for(int64_t n, F&& f) {
#if defined(_OPENMP)
  thread_local const bool dynamic_set = (omp_set_dynamic(1), true);
  (void)dynamic_set;
#pragma omp parallel for schedule(static) if (n > 1)
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace strata
