// Shape and device checks shared by the CPU ops.
#pragma once

#include "strata/core/error.h"
#include "strata/core/tensor.h"

namespace strata::ops {

// The CPU reference computes in float32 on host tensors.
inline void expect_cpu_f32(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.device() == Device::kCpu && t.dtype() == DType::kF32, op, ": ", what,
               " must be a CPU F32 tensor, got ", t.describe());
}

inline void expect_shape(const Tensor& t, const Shape& s, const char* op, const char* what) {
  STRATA_CHECK(t.shape() == s, op, ": ", what, " expected ", shape_str(s), ", got ", t.describe());
}

// Number of rows when the tensor is viewed as [rows, last_dim].
inline int64_t rows_of(const Tensor& t) { return t.ndim() ? t.numel() / t.dim(-1) : 0; }

}  // namespace strata::ops
