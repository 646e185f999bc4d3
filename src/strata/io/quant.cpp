#include "strata/io/quant.h"

#include <cmath>
#include <vector>

#include "strata/core/error.h"
#include "strata/core/fp4_rows.h"
#include "strata/core/parallel.h"

namespace strata {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scale tensors as float32 (their dtype checked by the caller).
std::vector<float> scales_f32(const Tensor& scale) {
  std::vector<float> out(static_cast<size_t>(scale.numel()));
  to_f32(scale.dtype(), scale.raw(), out.data(), out.size());
  return out;
}

// The e2m1 pairs of packed [n, k / 2] (low nibble first) as F32 [n, k]: element (r, c) is
// value(r, c, code), nvfp4_value or mxfp4_value (core/dtype.h) with the element's scales, the
// helpers Tensor::to_f32 shares.
template <typename Value>
Tensor unpack_fp4(const Tensor& packed, int64_t n, int64_t k, Value value) {
  Tensor out = Tensor::empty({n, k}, DType::kF32);
  unpack_fp4_rows(packed.data<uint8_t>(), n, k, out.data<float>(), value);
  return out;
}

}  // namespace

Tensor dequant_fp8_block(const Tensor& w, const Tensor& scale, int block_rows, int block_cols,
                         const std::string& name) {
  STRATA_CHECK(w.device() == Device::kCpu && scale.device() == Device::kCpu, name,
               ": FP8 dequantisation reads CPU tensors");
  STRATA_CHECK(w.dtype() == DType::kF8E4M3 && w.ndim() == 2, name, ": expected an F8_E4M3 matrix, got ",
               w.describe());
  STRATA_CHECK(block_rows > 0 && block_cols > 0, name, ": bad FP8 block size ", block_rows, "x",
               block_cols);
  const DType st = scale.dtype();
  STRATA_CHECK(st == DType::kUE8M0 || st == DType::kF32 || st == DType::kBF16 || st == DType::kF16,
               name, ": FP8 block scale must be F8_E8M0, F32, BF16 or F16, got ", dtype_name(st));
  const int64_t n = w.dim(0), k = w.dim(1);
  const Shape want{ceil_div(n, block_rows), ceil_div(k, block_cols)};
  STRATA_CHECK(scale.shape() == want, name, ": FP8 block scale for ", w.describe(), " in ",
               block_rows, "x", block_cols, " blocks must be ", shape_str(want), ", got ",
               scale.describe());
  const std::vector<float> s = scales_f32(scale);
  for (size_t i = 0; i < s.size(); ++i) {
    STRATA_CHECK(std::isfinite(s[i]), name, ": FP8 block scale ", i, " is not finite");
  }
  const uint8_t* codes = w.data<uint8_t>();
  for (int64_t i = 0; i < n * k; ++i) {
    STRATA_CHECK((codes[i] & 0x7f) != 0x7f, name, ": FP8 weight element ", i / k, ",", i % k,
                 " is NaN (code 0x", std::hex, int(codes[i]), ")");
  }
  Tensor out = Tensor::empty({n, k}, DType::kF32);
  float* o = out.data<float>();
  const int64_t scale_cols = want[1];
  parallel_for(n, [&](int64_t r) {
    const float* srow = s.data() + (r / block_rows) * scale_cols;
    for (int64_t c = 0; c < k; ++c) o[r * k + c] = f8e4m3_to_f32(codes[r * k + c]) * srow[c / block_cols];
  });
  return out;
}

Tensor dequant_mxfp4(const Tensor& packed, const Tensor& scale, const std::string& name) {
  STRATA_CHECK(packed.device() == Device::kCpu && scale.device() == Device::kCpu, name,
               ": MXFP4 dequantisation reads CPU tensors");
  STRATA_CHECK((packed.dtype() == DType::kU8 || packed.dtype() == DType::kI8) && packed.ndim() == 2,
               name, ": expected MXFP4 weights packed as a U8 or I8 matrix, got ", packed.describe());
  STRATA_CHECK(scale.dtype() == DType::kUE8M0 || scale.dtype() == DType::kU8, name,
               ": MXFP4 scale must be F8_E8M0 (or U8), got ", dtype_name(scale.dtype()));
  const int64_t n = packed.dim(0), k = packed.dim(1) * 2;
  STRATA_CHECK(k % kMxfp4Group == 0, name, ": MXFP4 rows of ", k, " elements are not a multiple of ",
               kMxfp4Group);
  const Shape want{n, k / kMxfp4Group};
  STRATA_CHECK(scale.shape() == want, name, ": MXFP4 scale for ", k, "-element rows must be ",
               shape_str(want), ", got ", scale.describe());
  check_fp4_scales(scale, false, name);
  const uint8_t* sb = scale.data<uint8_t>();
  return unpack_fp4(packed, n, k, [&](int64_t r, int64_t c, uint8_t code) {
    return mxfp4_value(code, sb[r * want[1] + c / kMxfp4Group]);
  });
}

Tensor dequant_nvfp4(const Tensor& packed, const Tensor& scale, float global, const std::string& name) {
  STRATA_CHECK(packed.device() == Device::kCpu && scale.device() == Device::kCpu, name,
               ": NVFP4 dequantisation reads CPU tensors");
  STRATA_CHECK((packed.dtype() == DType::kU8 || packed.dtype() == DType::kI8) && packed.ndim() == 2,
               name, ": expected NVFP4 weights packed as a U8 or I8 matrix, got ", packed.describe());
  STRATA_CHECK(scale.dtype() == DType::kF8E4M3, name, ": NVFP4 block scale (weight_scale) must be F8_E4M3, got ",
               dtype_name(scale.dtype()));
  const int64_t n = packed.dim(0), k = packed.dim(1) * 2;
  STRATA_CHECK(k % kNvfp4Group == 0, name, ": NVFP4 rows of ", k, " elements are not a multiple of ",
               kNvfp4Group);
  const Shape want{n, k / kNvfp4Group};
  STRATA_CHECK(scale.shape() == want, name, ": NVFP4 block scale for ", k, "-element rows must be ",
               shape_str(want), ", got ", scale.describe());
  check_nvfp4_global(global, name);
  check_fp4_scales(scale, true, name);
  const uint8_t* sb = scale.data<uint8_t>();
  return unpack_fp4(packed, n, k, [&](int64_t r, int64_t c, uint8_t code) {
    return nvfp4_value(code, sb[r * want[1] + c / kNvfp4Group], global);
  });
}

void check_fp4_scales(const Tensor& scale, bool nvfp4, const std::string& name) {
  const int64_t groups = scale.ndim() ? scale.dim(-1) : 1;
  const auto* b = static_cast<const uint8_t*>(scale.raw());
  for (int64_t i = 0; i < scale.numel(); ++i) {
    const bool nan = nvfp4 ? (b[i] & 0x7f) == 0x7f : b[i] == 0xff;
    const bool negative = nvfp4 && (b[i] & 0x80) && (b[i] & 0x7f);  // -0 is a zero block
    STRATA_CHECK(!nan && !negative, name, ": ", nvfp4 ? "NVFP4 block" : "MXFP4", " scale at row ", i / groups,
                 ", group ", i % groups, " is ", nan ? "NaN" : "negative", " (code 0x", std::hex, int(b[i]), ")");
  }
}

void check_nvfp4_global(float global, const std::string& name) {
  STRATA_CHECK(std::isfinite(global) && global > 0, name, ": NVFP4 global scale (weight_scale_2) ", global,
               " is not finite and positive");
}

}  // namespace strata
