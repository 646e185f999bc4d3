// FP8 rows of activations on the device (quantize_fp8_rows in ops.h): F8_E4M3 codes [rows,
// cols] and F32 scales [rows, ceil(cols / 128)], for the W8A8 expert GEMMs.
#pragma once

#include <cstdint>

#include "strata/ops/cuda/common.cuh"

namespace strata::ops::cuda {

// x [rows, cols] bf16 (cols a multiple of 8) into codes q [rows, cols] and scales [rows, groups].
void quantize_fp8_rows(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale);
// The same codes, the scales stored by group: [groups, rows] (what cuBLASLt's per-128 scales of
// an operand are: the rows contiguous).
void quantize_fp8_rows_by_group(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale);

}  // namespace strata::ops::cuda
