// ForwardBatch builders and random inputs shared by the op tests (CPU and CUDA).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"

namespace strata::testing {

// A batch of sequences with the given new-token counts and cached lengths, one slot each and
// pages laid out in reverse order (so page indirection is exercised); *num_blocks receives the
// pages used.
inline ForwardBatch make_batch(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx_lens,
                               int block_size, int* num_blocks) {
  ForwardBatch b;
  int32_t row = 0, next_block = 0;
  for (size_t s = 0; s < q_lens.size(); ++s) {
    SeqInBatch q;
    q.q_start = row;
    q.q_len = q_lens[s];
    q.ctx_len = ctx_lens[s];
    q.state_slot = int32_t(s);
    const int pages = (q.ctx_len + q.q_len + block_size - 1) / block_size;
    for (int p = 0; p < pages; ++p) q.block_table.push_back(next_block + pages - 1 - p);
    next_block += pages;
    for (int32_t i = 0; i < q.q_len; ++i) {
      b.token_ids.push_back(0);
      b.positions.push_back(q.ctx_len + i);
    }
    row += q.q_len;
    b.seqs.push_back(q);
  }
  *num_blocks = next_block;
  return b;
}

// A CPU F32 tensor of normal(0, scale) draws.
inline Tensor random_tensor(Shape shape, std::mt19937& rng, float scale = 1.f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  std::normal_distribution<float> d(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

}  // namespace strata::testing
