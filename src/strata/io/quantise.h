// Quantisation of float32 weights to the published formats that io/quant.h dequantises, by the
// recipes the published checkpoints use (round to nearest, ties to the even code):
//   FP8 block (Qwen's and DeepSeek's -FP8 checkpoints, transformers' FineGrainedFP8): per block of
//     block_rows x block_cols, scale = amax / 448 (1 for a zero block), code = e4m3(w / scale);
//     stored as the F8_E4M3 weight and its F32 weight_scale_inv = scale.
//   NVFP4 (NVIDIA ModelOpt): global = amax / (6 * 448) of the whole tensor (1 when zero); per 16
//     elements of a row, scale = e4m3(block amax / (6 * global)); code = e2m1(w / (scale * global)),
//     two codes a byte, low nibble first.
//   MXFP4 (the OCP MX recipe): per 32 elements of a row a power-of-two scale, below.
// Used by the tests and by `strata quantize`. A non-finite weight is an Error naming `name`.
#pragma once

#include <cstdint>
#include <string>

#include "strata/core/tensor.h"

namespace strata {

// The nearest finite e4m3fn code to x (saturating at +-448) and e2m1 code (saturating at +-6).
uint8_t f32_to_e4m3(float x);
uint8_t f32_to_e2m1(float x);

struct Fp8BlockWeight {
  Tensor weight;     // F8_E4M3 [N, K]
  Tensor scale_inv;  // F32 [ceil(N / block_rows), ceil(K / block_cols)]
};
// w: F32 [N, K].
Fp8BlockWeight quantise_fp8_block(const Tensor& w, int block_rows, int block_cols, const std::string& name);

struct Nvfp4Weight {
  Tensor packed;  // U8 [N, K / 2]
  Tensor scale;   // F8_E4M3 [N, K / 16]
  Tensor global;  // F32 [] (ModelOpt's weight_scale_2)
};
// w: F32 [N, K] with K a multiple of 16.
Nvfp4Weight quantise_nvfp4(const Tensor& w, const std::string& name);

struct Mxfp4Weight {
  Tensor packed;  // U8 [N, K / 2], e2m1 pairs, low nibble first
  Tensor scale;   // U8 [N, K / 32], UE8M0 exponents (2^(byte - 127))
};
// The OCP MX recipe: per 32 elements of a row, X = 2^(floor(log2(amax)) - 2) (e2m1's largest
// exponent is 2; a zero block takes 2^0), code = e2m1(w / X), saturating at +-6. w: F32 [N, K]
// with K a multiple of 32.
Mxfp4Weight quantise_mxfp4(const Tensor& w, const std::string& name);

}  // namespace strata
