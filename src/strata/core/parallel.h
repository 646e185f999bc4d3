// Data-parallel loops on the CPU (OpenMP when available).
#pragma once

#include <cstdint>

namespace strata {

// Calls f(i) for i in [0, n), spread over the CPU cores. f must be safe to run concurrently.
template <class F>
void parallel_for(int64_t n, F&& f) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) if (n > 1)
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace strata
