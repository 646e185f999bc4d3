// The one loop over packed e2m1 codes (two a byte, low nibble first), shared by the checkpoint
// dequantisers (io/quant.cpp) and Tensor::to_f32 of kept F4_E2M1 weights.
#pragma once

#include <cstdint>

#include "strata/core/parallel.h"

namespace strata {

// out[r * cols + c] = value(r, c, code) for the codes of `rows` rows of `cols` (even) elements
// packed at `codes`, rows in parallel: value is nvfp4_value or mxfp4_value (core/dtype.h) with the
// element's scales.
template <class Value>
void unpack_fp4_rows(const uint8_t* codes, int64_t rows, int64_t cols, float* out, Value value) {
  parallel_for(rows, [&](int64_t r) {
    for (int64_t c = 0; c < cols; c += 2) {
      const uint8_t byte = codes[(r * cols + c) / 2];
      out[r * cols + c] = value(r, c, uint8_t(byte & 0xf));
      out[r * cols + c + 1] = value(r, c + 1, uint8_t(byte >> 4));
    }
  });
}

}  // namespace strata
