// The chunked Gated DeltaNet form (gdn_chunked.cu), called by gated_delta_rule for the
// sequences of a batch that bring more than one token.
#pragma once

#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {

// The gated delta rule over the sequences `seqs` of the batch in chunks of 64 from each span's
// start (as the CPU's kChunked): q, k, v, out BF16; g, beta, state F32.
void gdn_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const ForwardBatch& batch, const DeviceBatch& db,
                 const std::vector<int32_t>& seqs, const Tensor& out);

}  // namespace strata::ops::cuda
