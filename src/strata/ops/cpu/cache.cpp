// CPU reference: cache-pool management ops.
#include <cstring>

#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {

void copy_slot(const Tensor& pool, int64_t src, int64_t dst) {
  STRATA_CUDA_DISPATCH(pool, copy_slot(pool, src, dst));
  STRATA_CHECK(pool.device() == Device::kCpu, "copy_slot: pool must be a CPU tensor, got ",
               pool.describe());
  STRATA_CHECK(pool.ndim() >= 1 && src >= 0 && dst >= 0 && src < pool.dim(0) && dst < pool.dim(0),
               "copy_slot: slots ", src, " -> ", dst, " out of range for pool ", pool.describe());
  if (src == dst) return;
  const size_t row = pool.nbytes() / size_t(pool.dim(0));
  char* base = static_cast<char*>(pool.raw());
  std::memcpy(base + size_t(dst) * row, base + size_t(src) * row, row);
}

void copy_slots(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies) {
  if (pools.empty() || copies.empty()) return;
  STRATA_CUDA_DISPATCH(pools[0], copy_slots(pools, copies));
  for (const Tensor& pool : pools) {
    for (const SlotCopy& c : copies) copy_slot(pool, c.src, c.dst);
  }
}

}  // namespace strata::ops
