// Dequantisation of the published quantised weight formats to float32 (CPU):
//   FP8 block:  e4m3 weights [N, K] with one scale per block of block_rows x block_cols
//               (DeepSeek: 128 x 128), the scales ue8m0 (F8_E8M0) or float (F32/BF16/F16).
//   MXFP4:      e2m1 pairs packed in U8/I8 [N, K/2], low nibble first (element 2j in bits 0-3),
//               one ue8m0 scale per 32 consecutive elements of a row [N, K/32].
//   NVFP4:      (NVIDIA ModelOpt) e2m1 pairs packed as MXFP4, one e4m3 scale per 16 consecutive
//               elements of a row [N, K/16], and one float32 scale for the whole tensor.
// Every error names the tensor (`name`) and what is wrong; nothing is thrown inside the loops.
#pragma once

#include <string>

#include "strata/core/tensor.h"

namespace strata {

inline constexpr int kMxfp4Group = 32;
inline constexpr int kNvfp4Group = 16;

// w: F8_E4M3 [N, K]; scale: [ceil(N / block_rows), ceil(K / block_cols)] of UE8M0, F32, BF16
// or F16. Returns F32 [N, K] with w[i, j] = e4m3(w[i, j]) * scale[i / block_rows, j / block_cols]
// (one float32 multiply, as torch does). A NaN weight code or scale is an error.
Tensor dequant_fp8_block(const Tensor& w, const Tensor& scale, int block_rows, int block_cols,
                         const std::string& name);

// packed: U8 or I8 [N, K / 2]; scale: UE8M0 or U8 [N, K / 32]. Returns F32 [N, K] with
// w[i, j] = e2m1(nibble j of row i) * 2^(scale[i, j / 32] - 127). A NaN scale (0xff) is an error.
Tensor dequant_mxfp4(const Tensor& packed, const Tensor& scale, const std::string& name);

// packed: U8 or I8 [N, K / 2]; scale: F8_E4M3 [N, K / 16]; global: the tensor's float32 scale
// (ModelOpt's weight_scale_2). Returns F32 [N, K] with w[i, j] = (e2m1(nibble j of row i) *
// e4m3(scale[i, j / 16])) * global, in that order of float32 multiplies (core/dtype.h's nvfp4_value;
// dequant_mxfp4's mxfp4_value: Tensor::to_f32 of kept F4_E2M1 weights shares both). A NaN or negative block
// scale (-0 is a zero block), or a global scale that is not finite and positive, is an error.
Tensor dequant_nvfp4(const Tensor& packed, const Tensor& scale, float global, const std::string& name);

// The scale checks of the two FP4 dequantisers above, for a loader that keeps the codes too: of
// `scale` bytes [..., groups] (NVFP4: F8_E4M3, neither NaN nor negative, -0 being a zero block;
// MXFP4: UE8M0 or U8, not the NaN 0xff), the first bad one an Error naming `name`, its row and
// group; NVFP4's global (weight_scale_2) finite and positive.
void check_fp4_scales(const Tensor& scale, bool nvfp4, const std::string& name);
void check_nvfp4_global(float global, const std::string& name);

}  // namespace strata
