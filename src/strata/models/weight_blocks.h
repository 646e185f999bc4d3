// What the weight loader's files (weights.cpp, weights_fp4.cpp) share: how a stored tensor's
// experts, rows and columns become copy blocks, and the dummy weights' range.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/block_copy.h"
#include "strata/core/tensor.h"

namespace strata::weight_blocks {

// The dummy weights' values: uniform in +-kRandomRange (HF's initializer_range 0.02 as the
// standard deviation of a uniform distribution).
inline constexpr float kRandomRange = 0.0346f;

// The seed of a dummy weight: FNV-1a of its name, stable across runs.
uint64_t name_seed(const std::string& name);

// The blocks of a stored [E, R, C] tensor ([R, C]: one expert) at `src`: experts
// [expert_begin, + expert_count), of each the row ranges `rows`, of each row the columns `cols`.
std::vector<CopyBlock> expert_blocks(const char* src, DType dtype, const Shape& shape, int64_t expert_begin,
                                     int64_t expert_count, const std::vector<std::pair<int64_t, int64_t>>& rows,
                                     std::pair<int64_t, int64_t> cols, const std::string& what);

// Expert e's [rows, cols] slab of `dtype` in a stored [E, ...] tensor (a matrix is expert 0), as
// a view.
Tensor expert_slab(const Tensor& t, int64_t e, int64_t rows, int64_t cols, DType dtype);

// A quantised weight of `shape`, a matrix [rows, cols] or fused experts [E, rows, cols], as F32:
// `dequant(e)` gives expert e's [rows, cols] (the matrix's own for a matrix).
Tensor stack_experts(const Shape& shape, const std::function<Tensor(int64_t)>& dequant);

}  // namespace strata::weight_blocks
