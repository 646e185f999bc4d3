// The routed experts' weights as the CPU's MoE ops read them: one expert's float32 [rows, cols]
// slab at a time. Float experts are read in place; block-scaled experts (Tensor::with_scale: an
// FP8, NVFP4 or MXFP4 checkpoint's experts kept compressed) are dequantised once a call (to_f32),
// only the experts the call's ids choose.
#pragma once

#include <map>

#include "strata/ops/cpu/check.h"

namespace strata::ops {

class ExpertSlabs {
 public:
  // w: [E, rows, cols], F32, or scaled F8_E4M3 or F4_E2M1, on the CPU; ids: I32 expert ids, local expert
  // e = id - first (ids outside [first, first + E) are another rank's, skipped).
  ExpertSlabs(const Tensor& w, const Tensor& ids, int64_t first, const char* op, const char* what)
      : w_(w), slab_(w.ndim() == 3 ? w.dim(1) * w.dim(2) : 0) {
    if (!w.scaled()) {
      expect_cpu_f32(w, op, what);
      return;
    }
    STRATA_CHECK(w.device() == Device::kCpu && w.ndim() == 3, op, ": ", what, " must be CPU experts [E, R, C], got ",
                 w.describe());
    const int32_t* id = ids.data<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      const int64_t e = id[i] - first;
      if (e >= 0 && e < w.dim(0) && !dequantised_.count(e)) dequantised_.emplace(e, w.rows(e, e + 1).to_f32());
    }
  }
  // Local expert e's slab (one ids chose, for scaled experts).
  const float* operator()(int64_t e) const {
    return w_.scaled() ? dequantised_.at(e).data<float>() : w_.data<float>() + e * slab_;
  }

 private:
  Tensor w_;
  int64_t slab_;
  std::map<int64_t, Tensor> dequantised_;
};

}  // namespace strata::ops
