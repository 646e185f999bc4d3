// Host reads of a few logits rows (speculative decoding's acceptance, engine_speculative.cpp)
// from F32 x [N, V] on either device. On CUDA the rows are gathered (and reduced) on the device
// and only the result comes back, in one copy through pinned memory; both return once it is on
// the host. Kept out of ops.h: they are host-side reads, not ops a forward is written over.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/core/tensor.h"

namespace strata::ops {

// out[i * V + j] = x[rows[i], j].
void rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<float>& out);
// ids[i] = ops::argmax's pick for row rows[i] of x (the lower index wins a tie).
void argmax_rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<int32_t>& ids);

#if defined(STRATA_WITH_CUDA)
namespace cuda {  // ops/cuda/sampling.cu
void rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<float>& out);
void argmax_rows_to_host(const Tensor& x, const std::vector<int32_t>& rows, std::vector<int32_t>& ids);
}  // namespace cuda
#endif

}  // namespace strata::ops
