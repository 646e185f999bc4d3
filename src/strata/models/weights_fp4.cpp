// The weight loader's NVFP4 and MXFP4 weights: each checked once (fp4_stored), then either
// dequantised to F32 at load (every FP4 weight but the kept experts) or, for the routed experts,
// kept as stored (keep_fp4_experts: codes and scale bytes copied as they are, NVFP4's global
// expanded to one F32 a row).
#include <cmath>
#include <cstring>

#include "strata/core/error.h"
#include "strata/core/parallel.h"
#include "strata/io/quant.h"
#include "strata/models/weight_blocks.h"
#include "strata/models/weights.h"
#include "strata/ops/cuda/dispatch.h"

namespace strata {

using weight_blocks::expert_blocks;
using weight_blocks::expert_slab;
using weight_blocks::kRandomRange;
using weight_blocks::name_seed;
using weight_blocks::stack_experts;

namespace {

// Kept FP4 columns come in whole 16-byte runs of codes: one MXFP4 group, two NVFP4 groups.
constexpr int64_t kFp4KeptColumns = 32;

}  // namespace

// ModelOpt's NVFP4 linear: `<module>.weight` U8 [.., out, in / 2], `.weight_scale` F8_E4M3
// [.., out, in / 16], `.weight_scale_2` F32 (one value, or one an expert for fused experts
// [E, out, in]) and `.input_scale` F32 (W4A4's activation scale: checked, marked read, unused).
// compressed-tensors' MXFP4 linear: `<module>.weight_packed` U8 [.., out, in / 2] (e2m1 pairs, low
// nibble first) and `<module>.weight_scale` U8 or F8_E8M0 [.., out, in / 32]; no global scale.
WeightLoader::Fp4Stored WeightLoader::fp4_stored(const std::string& full_name, const Shape& shape) {
  Fp4Stored st;
  st.nvfp4 = quant_.method == WeightQuant::Method::kNvfp4;
  st.group = st.nvfp4 ? kNvfp4Group : kMxfp4GroupSize;
  st.codes_name = st.nvfp4 ? full_name : full_name + "_packed";
  st.scale_name = full_name + "_scale";
  const std::string what = ckpt_.file_of(st.codes_name) + ": tensor '" + st.codes_name + "'";
  const char* format = st.nvfp4 ? "NVFP4" : "MXFP4";
  const TensorInfo& info = ckpt_.info(st.codes_name);
  if (st.nvfp4) {
    STRATA_CHECK(!quant_.listed_not_converted(full_name), what, " is ", dtype_name(info.dtype),
                 " (NVFP4), but its module is listed as not quantised in ", quant_.origin, " (expected BF16)");
  } else {
    STRATA_CHECK(!quant_.listed_not_converted(full_name), what, " is MXFP4, but its module is listed in ",
                 quant_.origin, " quantization_config.ignore (expected '", full_name, "' in BF16)");
  }
  STRATA_CHECK((shape.size() == 2 || shape.size() == 3) && shape.back() % st.group == 0, what, ": an ", format,
               " weight must be a matrix [out, in] or fused experts [E, out, in] with in a multiple of ", st.group,
               ", expected ", shape_str(shape));
  Shape packed_shape = shape, scale_shape = shape;
  packed_shape.back() /= 2;
  scale_shape.back() /= st.group;
  stored(st.codes_name, packed_shape, false);
  STRATA_CHECK(info.dtype == DType::kU8 || info.dtype == DType::kI8, what, ": ", format,
               " codes must be U8 (or I8), got ", dtype_name(info.dtype));
  STRATA_CHECK(ckpt_.has(st.scale_name), what, " is ", format, " but has no '", st.scale_name, "'");
  const TensorInfo& s = ckpt_.info(st.scale_name);
  if (st.nvfp4) {
    STRATA_CHECK(full_name.ends_with(".weight"), what, ": an NVFP4 weight's name must end in '.weight'");
    st.global_name = full_name + "_scale_2";
    STRATA_CHECK(ckpt_.has(st.global_name), what, " is NVFP4 but has no '", st.global_name, "'");
    STRATA_CHECK(s.dtype == DType::kF8E4M3, ckpt_.file_of(st.scale_name), ": tensor '", st.scale_name,
                 "': block scale of '", full_name, "' must be F8_E4M3, got ", dtype_name(s.dtype));
  } else {
    STRATA_CHECK(s.dtype == DType::kU8 || s.dtype == DType::kUE8M0, ckpt_.file_of(st.scale_name), ": tensor '",
                 st.scale_name, "': scale of '", st.codes_name, "' must be U8 or F8_E8M0 exponents, got ",
                 dtype_name(s.dtype));
  }
  stored(st.scale_name, scale_shape, false);
  if (st.nvfp4) {
    const int64_t experts = shape.size() == 3 ? shape[0] : 1;
    // One F32 value for the tensor, or (fused experts) one an expert.
    auto scalars = [&](const std::string& n) {
      const TensorInfo& g = ckpt_.info(n);
      STRATA_CHECK(g.dtype == DType::kF32 && (g.nbytes() == 4 || g.nbytes() == size_t(experts) * 4),
                   ckpt_.file_of(n), ": tensor '", n, "' of '", full_name, "' must be F32 with 1",
                   experts > 1 ? " or " : "", experts > 1 ? std::to_string(experts) : "", " value(s), got ",
                   dtype_name(g.dtype), shape_str(g.shape));
      stored(n, g.shape, false);
      return ckpt_.get(n);
    };
    st.global = scalars(st.global_name);
    const std::string input_name = full_name.substr(0, full_name.size() - 6) + "input_scale";
    if (ckpt_.has(input_name)) scalars(input_name);
  }
  st.codes = ckpt_.get(st.codes_name);
  st.scale = ckpt_.get(st.scale_name);
  return st;
}

Tensor WeightLoader::dequantise_nvfp4(const std::string& full_name, const Shape& shape) {
  const Fp4Stored st = fp4_stored(full_name, shape);
  const std::string what = ckpt_.file_of(full_name) + ": tensor '" + full_name + "'";
  const int64_t experts = shape.size() == 3 ? shape[0] : 1, rows = shape[shape.size() - 2], cols = shape.back();
  return stack_experts(shape, [&](int64_t e) {
    const float g = st.global.data<float>()[st.global.numel() == 1 ? 0 : e];
    return dequant_nvfp4(expert_slab(st.codes, e, rows, cols / 2, DType::kU8),
                         expert_slab(st.scale, e, rows, cols / kNvfp4Group, DType::kF8E4M3), g,
                         experts == 1 ? what : cat(what, " expert ", e));
  });
}

Tensor WeightLoader::dequantise_mxfp4(const std::string& full_name, const Shape& shape) {
  const Fp4Stored st = fp4_stored(full_name, shape);
  const std::string what = ckpt_.file_of(st.codes_name) + ": tensor '" + st.codes_name + "'";
  const int64_t experts = shape.size() == 3 ? shape[0] : 1, rows = shape[shape.size() - 2], cols = shape.back();
  return stack_experts(shape, [&](int64_t e) {
    return dequant_mxfp4(expert_slab(st.codes, e, rows, cols / 2, DType::kU8),
                         expert_slab(st.scale, e, rows, cols / kMxfp4GroupSize, DType::kU8),
                         experts == 1 ? what : cat(what, " expert ", e));
  });
}

void WeightLoader::check_fp4_scales(const Fp4Stored& st) {
  strata::check_fp4_scales(st.scale, st.nvfp4, ckpt_.file_of(st.scale_name) + ": tensor '" + st.scale_name + "'");
  for (int64_t i = 0; st.global.defined() && i < st.global.numel(); ++i) {
    check_nvfp4_global(st.global.data<float>()[i], ckpt_.file_of(st.global_name) + ": tensor '" + st.global_name + "'");
  }
}

Tensor WeightLoader::kept_fp4(const std::vector<Fp4Part>& parts, int64_t experts_out, Range cols) {
  const bool nvfp4 = quant_.method == WeightQuant::Method::kNvfp4;
  const int64_t group = nvfp4 ? kNvfp4Group : kMxfp4GroupSize;
  int64_t total_rows = 0;
  for (const Fp4Part& p : parts) total_rows += p.rows;
  STRATA_CHECK(experts_out > 0 && total_rows % experts_out == 0 && cols.begin % kFp4KeptColumns == 0 &&
                   cols.count % kFp4KeptColumns == 0,
               "kept_fp4: ", total_rows, " rows for ", experts_out, " experts, columns [", cols.begin, ", ",
               cols.begin + cols.count, ")");
  const int64_t rows_out = total_rows / experts_out, groups = cols.count / group;
  Tensor scale = Tensor::empty({experts_out, rows_out, groups}, nvfp4 ? DType::kF8E4M3 : DType::kUE8M0);
  Tensor global = nvfp4 ? Tensor::empty({experts_out, rows_out}, DType::kF32) : Tensor();
  auto* so = static_cast<uint8_t*>(scale.raw());
  float* go = nvfp4 ? global.data<float>() : nullptr;
  std::vector<CopyBlock> blocks;
  for (const Fp4Part& p : parts) {
    STRATA_CHECK(p.full.size() == 2, "kept_fp4: '", p.name, "' ", shape_str(p.full), " is not one expert's matrix");
    const Fp4Stored st = fp4_stored(p.name, p.full);
    check_fp4_scales(st);
    const std::string what = ckpt_.file_of(st.codes_name) + ": tensor '" + st.codes_name + "'";
    const std::vector<CopyBlock> b = expert_blocks(ckpt_.data(st.codes_name), DType::kU8, {p.full[0], p.full[1] / 2},
                                                   0, 1, {{p.row0, p.rows}}, {cols.begin / 2, cols.count / 2}, what);
    blocks.insert(blocks.end(), b.begin(), b.end());
    const int64_t stored_groups = p.full[1] / group;
    const auto* sp = static_cast<const uint8_t*>(st.scale.raw());
    for (int64_t r = 0; r < p.rows; ++r) {
      std::memcpy(so, sp + (p.row0 + r) * stored_groups + cols.begin / group, size_t(groups));
      so += groups;
      if (go) *go++ = st.global.data<float>()[0];
    }
  }
  const Tensor codes = assemble_as({experts_out, rows_out, cols.count / 2}, DType::kU8, blocks)
                           .view_as({experts_out, rows_out, cols.count}, DType::kF4E2M1);
  return codes.with_scale(upload(scale), int(group), nvfp4 ? upload(global) : Tensor());
}

Tensor WeightLoader::random_fp4(const std::string& full_name, const Shape& shape) {
  const bool nvfp4 = quant_.method == WeightQuant::Method::kNvfp4;
  const int64_t group = nvfp4 ? kNvfp4Group : kMxfp4GroupSize;
  STRATA_CHECK(shape.size() >= 2 && shape.back() % kFp4KeptColumns == 0, full_name, ": random FP4 weights ",
               shape_str(shape), " need rows of a multiple of ", kFp4KeptColumns);
  // Byte i of `t`: `lo` + floor(n * (u + 1) / 2), u = random_uniform_value in [-1, 1) (exact).
  auto fill = [](Tensor& t, uint64_t seed, int lo, int n) {
    auto* b = static_cast<uint8_t*>(t.raw());
    const int64_t size = int64_t(t.nbytes());
    parallel_for((size + 65535) / 65536, [&](int64_t blk) {
      for (int64_t i = blk * 65536; i < std::min(size, (blk + 1) * 65536); ++i) {
        const float u = ops::random_uniform_value(seed, uint64_t(i), 1.f) + 1.f;
        b[i] = uint8_t(lo + int(u * float(n) * 0.5f));
      }
    });
  };
  Shape packed = shape, scale_shape = shape;
  packed.back() /= 2;
  scale_shape.back() /= group;
  Tensor codes = Tensor::empty(packed, DType::kU8);
  fill(codes, name_seed(full_name), 0, 256);
  Tensor scale = Tensor::empty(scale_shape, nvfp4 ? DType::kF8E4M3 : DType::kUE8M0);
  fill(scale, name_seed(full_name + "_scale"), nvfp4 ? 0x70 : 118, nvfp4 ? 15 : 2);
  Tensor global;
  if (nvfp4) {
    global = Tensor::empty(Shape(shape.begin(), shape.end() - 1), DType::kF32);
    std::fill(global.data<float>(), global.data<float>() + global.numel(), kRandomRange / (6.f * 448.f));
  }
  return upload(codes).view_as(shape, DType::kF4E2M1).with_scale(upload(scale), int(group),
                                                                   nvfp4 ? upload(global) : Tensor());
}

bool WeightLoader::keep_experts_fp4(const std::string& p, const Shape& gate_up_shape, Range experts, Range inter,
                                    RoutedExperts& r) {
  const int64_t e = gate_up_shape.at(0), full_inter = gate_up_shape.at(1) / 2, h = gate_up_shape.at(2);
  if (h % kFp4KeptColumns || inter.begin % kFp4KeptColumns || inter.count % kFp4KeptColumns) return false;
  if (dummy()) return random_experts(p, h, experts, inter, keep_fp4_experts_, &WeightLoader::random_fp4, r);
  auto name = [&](int64_t j, const char* proj) { return cat(prefix_, p, "experts.", j, ".", proj, ".weight"); };
  for (int64_t j = 0; j < e; ++j) {
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      if (!quantised(name(j, proj))) return false;
    }
  }
  const Shape in_shape{full_inter, h}, out_shape{h, full_inter};
  std::vector<Fp4Part> gate_up, down;
  for (int64_t j = 0; j < e; ++j) {
    if (j < experts.begin || j >= experts.begin + experts.count) {  // another rank's: checked and marked only
      for (const auto& [proj, shape] : {std::pair{"gate_proj", in_shape}, std::pair{"up_proj", in_shape},
                                        std::pair{"down_proj", out_shape}}) {
        check_fp4_scales(fp4_stored(name(j, proj), shape));
      }
      continue;
    }
    gate_up.push_back({name(j, "gate_proj"), in_shape, inter.begin, inter.count});
    gate_up.push_back({name(j, "up_proj"), in_shape, inter.begin, inter.count});
    down.push_back({name(j, "down_proj"), out_shape, 0, h});
  }
  r.gate_up = kept_fp4(gate_up, experts.count, {0, h});
  r.down = kept_fp4(down, experts.count, inter);
  return true;
}

}  // namespace strata
