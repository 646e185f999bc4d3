#include "strata/models/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>

#include "strata/core/error.h"
#include "strata/core/parallel.h"
#include "strata/io/quant.h"
#include "strata/models/weight_blocks.h"
#include "strata/ops/ops.h"
#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/weight_upload.h"
#endif

namespace strata {
namespace {

std::unique_ptr<BlockWriter> make_writer(Device device) {
  if (device == Device::kCpu) return make_host_writer();
#if defined(STRATA_WITH_CUDA)
  return ops::cuda::make_weight_uploader();
#else
  fail("loading weights onto the GPU needs the CUDA backend (this build has none)");
#endif
}

}  // namespace

namespace weight_blocks {

uint64_t name_seed(const std::string& name) {
  uint64_t seed = 1469598103934665603ull;
  for (unsigned char c : name) seed = (seed ^ c) * 1099511628211ull;
  return seed;
}

std::vector<CopyBlock> expert_blocks(const char* src, DType dtype, const Shape& shape, int64_t expert_begin,
                                     int64_t expert_count, const std::vector<std::pair<int64_t, int64_t>>& rows,
                                     std::pair<int64_t, int64_t> cols, const std::string& what) {
  STRATA_CHECK(shape.size() == 2 || shape.size() == 3, what, ": experts ", dtype_name(dtype), shape_str(shape),
               " are not [E, R, C]");
  const Shape t = shape.size() == 2 ? Shape{1, shape[0], shape[1]} : shape;
  const int64_t e = t[0], r = t[1], c = t[2];
  const auto [col_begin, col_count] = cols;
  const std::string describe = cat(dtype_name(dtype), shape_str(t));
  STRATA_CHECK(expert_begin >= 0 && expert_count > 0 && expert_begin + expert_count <= e && col_begin >= 0 &&
                   col_count > 0 && col_begin + col_count <= c,
               what, ": shard of experts [", expert_begin, ", ", expert_begin + expert_count, ") columns [",
               col_begin, ", ", col_begin + col_count, ") does not fit ", describe);
  for (const auto& [b, n] : rows) {
    STRATA_CHECK(b >= 0 && n > 0 && b + n <= r, what, ": rows [", b, ", ", b + n, ") do not fit ", describe);
  }
  const size_t esz = dtype_size(dtype);
  std::vector<CopyBlock> blocks;
  for (int64_t j = expert_begin; j < expert_begin + expert_count; ++j) {
    for (const auto& [b, n] : rows) {
      const char* first = src + ((j * r + b) * c + col_begin) * int64_t(esz);
      blocks.push_back({first, dtype, n, col_count, c});
    }
  }
  return blocks;
}

Tensor expert_slab(const Tensor& t, int64_t e, int64_t rows, int64_t cols, DType dtype) {
  const size_t bytes = size_t(rows * cols) * dtype_size(dtype);
  return Tensor::view_of(nullptr, static_cast<char*>(t.raw()) + size_t(e) * bytes, {rows, cols}, dtype);
}

Tensor stack_experts(const Shape& shape, const std::function<Tensor(int64_t)>& dequant) {
  if (shape.size() == 2) return dequant(0);
  const int64_t slab = shape[1] * shape[2];
  Tensor out = Tensor::empty(shape, DType::kF32);
  for (int64_t e = 0; e < shape[0]; ++e) {
    const Tensor d = dequant(e);
    std::memcpy(out.data<float>() + e * slab, d.data<float>(), size_t(slab) * sizeof(float));
  }
  return out;
}

}  // namespace weight_blocks

using weight_blocks::expert_blocks;
using weight_blocks::expert_slab;
using weight_blocks::stack_experts;
using weight_blocks::kRandomRange;
using weight_blocks::name_seed;

WeightLoader::WeightLoader(const Checkpoint& ckpt, std::string prefix, Device device, bool report_progress)
    : ckpt_(ckpt), prefix_(std::move(prefix)), device_(device),
      progress_(ckpt.dir(), ckpt.weightless() ? 0 : ckpt.tensor_bytes(), report_progress && !ckpt.weightless()) {}

WeightLoader::~WeightLoader() = default;  // the writer waits for its copies

void WeightLoader::finish() {
  if (writer_) writer_->finish();
  dequantised_.clear();
  progress_.finish();
}

std::string WeightLoader::detect_prefix(const Checkpoint& ckpt) {
  if (ckpt.weightless()) return "model.";
  for (const char* p : {"model.language_model.", "model.", "language_model.model.", ""}) {
    if (ckpt.has(std::string(p) + "embed_tokens.weight")) return p;
  }
  fail(ckpt.dir(), ": missing tensor 'model.embed_tokens.weight' (also looked for ",
       "'model.language_model.embed_tokens.weight')");
}

const TensorInfo& WeightLoader::stored(const std::string& full_name, const Shape& shape, bool float_only) {
  STRATA_CHECK(!dummy(), ckpt_.dir(), ": tensor '", full_name,
               "' must be read as stored, which --load-format dummy cannot do");
  const TensorInfo& info = ckpt_.info(full_name);
  STRATA_CHECK(info.shape == shape, ckpt_.file_of(full_name), ": tensor '", full_name,
               "': expected shape ", shape_str(shape), ", got ", shape_str(info.shape));
  const DType t = info.dtype;
  STRATA_CHECK(!float_only || t == DType::kF32 || t == DType::kBF16 || t == DType::kF16,
               ckpt_.file_of(full_name), ": tensor '", full_name, "': dtype ", dtype_name(t),
               " needs a quantised loader (expected BF16, F16 or F32)");
  if (used_.insert(full_name).second) progress_.add(info.nbytes());
  return info;
}

bool WeightLoader::packed_mxfp4(const std::string& full_name) const {
  return quant_.method == WeightQuant::Method::kMxfp4 && full_name.ends_with(".weight") &&
         !ckpt_.has(full_name) && ckpt_.has(full_name + "_packed");
}

bool WeightLoader::quantised(const std::string& full_name) const {
  if (packed_mxfp4(full_name)) return true;
  if (!quant_.enabled() || !ckpt_.has(full_name)) return false;
  const DType t = ckpt_.info(full_name).dtype;
  return quant_.method == WeightQuant::Method::kFp8Block ? t == DType::kF8E4M3 : t == DType::kU8 || t == DType::kI8;
}

WeightLoader::Source WeightLoader::source(const std::string& full_name, const Shape& shape) {
  if (quantised(full_name)) {
    auto it = dequantised_.find(full_name);
    if (it == dequantised_.end()) {
      Tensor d = quant_.method == WeightQuant::Method::kFp8Block ? dequantise_fp8(full_name, stored(full_name, shape, false))
                 : quant_.method == WeightQuant::Method::kNvfp4  ? dequantise_nvfp4(full_name, shape)
                                                                 : dequantise_mxfp4(full_name, shape);
      it = dequantised_.emplace(full_name, std::move(d)).first;
    }
    return {static_cast<const char*>(it->second.raw()), DType::kF32};
  }
  const TensorInfo& info = stored(full_name, shape, true);
  return {ckpt_.data(full_name), info.dtype};
}

Tensor WeightLoader::fp8_scales(const std::string& full_name, const TensorInfo& info) {
  const std::string what = ckpt_.file_of(full_name) + ": tensor '" + full_name + "'";
  STRATA_CHECK(!quant_.listed_not_converted(full_name), what, " is F8_E4M3, but its module is listed in ",
               quant_.origin, " quantization_config.modules_to_not_convert (expected BF16)");
  const std::string scale_name = full_name + "_scale_inv";
  STRATA_CHECK(ckpt_.has(scale_name), what, " is F8_E4M3 but has no block scale '", scale_name, "'");
  const Shape& shape = info.shape;
  STRATA_CHECK(shape.size() == 2 || shape.size() == 3, what, ": F8_E4M3 weight ", shape_str(shape),
               " is not a matrix [out, in] or fused experts [E, out, in]");
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const int64_t br = quant_.block_rows, bc = quant_.block_cols;
  Shape scale_shape{(rows + br - 1) / br, (cols + bc - 1) / bc};
  if (shape.size() == 3) scale_shape.insert(scale_shape.begin(), shape[0]);
  const TensorInfo& s = ckpt_.info(scale_name);
  STRATA_CHECK(s.dtype == DType::kF32, ckpt_.file_of(scale_name), ": tensor '", scale_name, "': block scale of '",
               full_name, "' must be F32, got ", dtype_name(s.dtype));
  stored(scale_name, scale_shape, false);  // shape checked, marked read
  return ckpt_.get(scale_name);
}

Tensor WeightLoader::dequantise_fp8(const std::string& full_name, const TensorInfo& info) {
  const std::string what = ckpt_.file_of(full_name) + ": tensor '" + full_name + "'";
  const Tensor scale = fp8_scales(full_name, info);
  const Tensor w = ckpt_.get(full_name);
  const Shape& shape = info.shape;
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const int64_t sr = scale.dim(-2), sc = scale.dim(-1);
  // Fused experts: each expert's [out, in] slab with its own scales.
  return stack_experts(shape, [&](int64_t e) {
    return dequant_fp8_block(expert_slab(w, e, rows, cols, DType::kF8E4M3), expert_slab(scale, e, sr, sc, DType::kF32),
                             quant_.block_rows, quant_.block_cols,
                             shape.size() == 2 ? what : cat(what, " expert ", e));
  });
}

Tensor WeightLoader::kept_fp8(const std::vector<Fp8Part>& parts, int64_t experts_out, Range cols) {
  const int64_t bc = quant_.block_cols, br = quant_.block_rows, groups = (cols.count + bc - 1) / bc;
  int64_t total_rows = 0;
  for (const Fp8Part& p : parts) total_rows += p.rows;
  STRATA_CHECK(experts_out > 0 && total_rows % experts_out == 0 && cols.begin % bc == 0, "kept_fp8: ",
               total_rows, " rows for ", experts_out, " experts, columns from ", cols.begin);
  const int64_t rows_out = total_rows / experts_out;
  Tensor scale = Tensor::empty({experts_out, rows_out, groups}, DType::kF32);
  float* so = scale.data<float>();
  std::vector<CopyBlock> blocks;
  for (const Fp8Part& p : parts) {
    const std::string what = ckpt_.file_of(p.name) + ": tensor '" + p.name + "'";
    const TensorInfo& info = stored(p.name, p.full, false);
    STRATA_CHECK(info.dtype == DType::kF8E4M3, what, ": expected F8_E4M3, got ", dtype_name(info.dtype));
    const Tensor s = fp8_scales(p.name, info);
    const std::vector<CopyBlock> b = expert_blocks(ckpt_.data(p.name), DType::kF8E4M3, p.full, p.expert, 1,
                                                   {{p.row0, p.rows}}, {cols.begin, cols.count}, what);
    const CopyBlock& cb = b.at(0);
    // A NaN code (0x7f or 0xff) is as corrupt here as in io/quant.h's dequantisation. The scan
    // notes the first one; the error is thrown outside the parallel loop.
    std::atomic<int64_t> bad{-1};
    parallel_for(cb.rows, [&](int64_t r) {
      const auto* row = static_cast<const uint8_t*>(cb.src) + r * cb.stride;
      for (int64_t c = 0; c < cb.cols; ++c) {
        if ((row[c] & 0x7f) == 0x7f) {
          int64_t none = -1;
          bad.compare_exchange_strong(none, r * cb.cols + c);
          return;
        }
      }
    });
    STRATA_CHECK(bad < 0, what, ": NaN weight code at expert ", p.expert, " row ", p.row0 + bad / cb.cols, " column ",
                 cols.begin + bad % cb.cols);
    const int64_t sr = s.dim(-2), sc = s.dim(-1);
    const float* sp = s.data<float>() + p.expert * sr * sc;
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const float v = sp[((p.row0 + r) / br) * sc + cols.begin / bc + g];
        STRATA_CHECK(std::isfinite(v), ckpt_.file_of(p.name), ": tensor '", p.name, "_scale_inv': scale ", v,
                     " at expert ", p.expert, " block (", (p.row0 + r) / br, ", ", cols.begin / bc + g, ")");
        *so++ = v;
      }
    }
    blocks.insert(blocks.end(), b.begin(), b.end());
  }
  Tensor codes = assemble_as({experts_out, rows_out, cols.count}, DType::kF8E4M3, blocks);
  return codes.with_scale(upload(scale), int(bc));
}

Tensor WeightLoader::random_fp8(const std::string& full_name, const Shape& shape) {
  // Codes uniform over +-448, times one scale: random()'s range.
  Tensor codes = random_on(full_name, shape, DType::kF8E4M3, device_, 448.f);
  bytes_ += codes.nbytes();
  Shape scale_shape(shape.begin(), shape.end() - 1);
  scale_shape.push_back((shape.back() + kFp8Block - 1) / kFp8Block);
  Tensor scale = Tensor::empty(scale_shape, DType::kF32);
  std::fill(scale.data<float>(), scale.data<float>() + scale.numel(), kRandomRange / 448.f);
  return codes.with_scale(upload(scale), kFp8Block);
}

Tensor WeightLoader::raw(const std::string& full_name, const Shape& shape) {
  stored(full_name, shape, false);
  return ckpt_.get(full_name);
}

Tensor WeightLoader::get(const std::string& name, const Shape& shape) {
  return get_top(prefix_ + name, shape);
}

Tensor WeightLoader::get_top(const std::string& full_name, const Shape& shape) {
  if (dummy()) return random(full_name, shape);
  const Source src = source(full_name, shape);
  return assemble(shape, {dense_block(src.data, src.dtype, shape_numel(shape))});
}

DType WeightLoader::device_dtype(const Shape& shape) const {
  return device_ == Device::kCuda && shape.size() >= 2 ? DType::kBF16 : DType::kF32;
}

Tensor WeightLoader::assemble(const Shape& shape, const std::vector<CopyBlock>& blocks) {
  return assemble_as(shape, device_dtype(shape), blocks);
}

Tensor WeightLoader::assemble_as(const Shape& shape, DType dtype, const std::vector<CopyBlock>& blocks) {
  Tensor out = Tensor::empty(shape, dtype, device_);
  if (!writer_) writer_ = make_writer(device_);
  writer_->write(out, blocks);
  bytes_ += out.nbytes();
  return out;
}

Tensor WeightLoader::to_device(const Tensor& cpu_f32) {
  STRATA_CHECK(cpu_f32.device() == Device::kCpu, "to_device: ", cpu_f32.describe(), " is not on the CPU");
  if (device_ == Device::kCpu) {
    bytes_ += cpu_f32.nbytes();
    return cpu_f32;
  }
  return assemble(cpu_f32.shape(), {dense_block(cpu_f32.raw(), cpu_f32.dtype(), cpu_f32.numel())});
}

Tensor WeightLoader::upload(const Tensor& host) {
  return assemble_as(host.shape(), host.dtype(), {dense_block(host.raw(), host.dtype(), host.numel())});
}

Tensor WeightLoader::random_on(const std::string& full_name, const Shape& shape, DType dtype, Device device,
                               float range) {
  Tensor t = Tensor::empty(shape, dtype, device);
  ops::fill_random_uniform(t, name_seed(full_name), range);
  return t;
}

Tensor WeightLoader::random(const std::string& full_name, const Shape& shape) {
  Tensor t = random_on(full_name, shape, device_dtype(shape), device_, kRandomRange);
  bytes_ += t.nbytes();
  return t;
}

Tensor WeightLoader::random_host(const std::string& full_name, const Shape& shape, DType dtype) {
  return random_on(full_name, shape, dtype, Device::kCpu, kRandomRange);
}

Tensor WeightLoader::get_host_f32(const std::string& full_name, const Shape& shape) {
  if (dummy()) return random_host(full_name, shape, DType::kF32);
  const Source src = source(full_name, shape);
  Tensor out = Tensor::empty(shape, DType::kF32);
  copy_blocks({dense_block(src.data, src.dtype, out.numel())}, 0, out.numel(), out.raw(), DType::kF32);
  return out;
}

std::string WeightLoader::slice_name(const Slice& s) const { return s.top ? s.name : prefix_ + s.name; }

Shape WeightLoader::slice_shape(const Slice& s) const {
  STRATA_CHECK((s.dim == 0 || (s.dim == 1 && s.full.size() == 2)) && s.begin >= 0 && s.count > 0 &&
                   s.begin + s.count <= s.full[size_t(s.dim)],
               slice_name(s), ": shard [", s.begin, ", ", s.begin + s.count, ") along dimension ", s.dim,
               " does not fit ", shape_str(s.full));
  Shape shape = s.full;
  shape[size_t(s.dim)] = s.count;
  return shape;
}

Tensor WeightLoader::get_slices(const std::vector<Slice>& parts) {
  STRATA_CHECK(!parts.empty(), "get_slices: no tensors");
  std::vector<CopyBlock> blocks;
  Shape total;
  for (const Slice& s : parts) {
    const std::string full_name = slice_name(s);
    const Shape shape = slice_shape(s);
    if (total.empty()) {
      total = shape;
    } else {
      STRATA_CHECK(shape.size() == total.size() && std::equal(total.begin() + 1, total.end(), shape.begin() + 1),
                   "get_slices: '", full_name, "' ", shape_str(shape), " does not stack on ", shape_str(total));
      total[0] += shape[0];
    }
    if (dummy()) continue;
    const Source in = source(full_name, s.full);
    const char* src = in.data;
    const int64_t esz = int64_t(dtype_size(in.dtype));
    if (s.dim == 0) {  // whole rows: one dense run
      const int64_t row = shape_numel(Shape(s.full.begin() + 1, s.full.end()));
      blocks.push_back(dense_block(src + s.begin * row * esz, in.dtype, s.count * row));
    } else {  // columns [begin, begin + count) of every row
      blocks.push_back({src + s.begin * esz, in.dtype, s.full[0], s.count, s.full[1]});
    }
  }
  if (dummy()) return random(slice_name(parts[0]), total);
  return assemble(total, blocks);
}

WeightLoader::Fp8Split WeightLoader::get_slices_fp8(const std::vector<Slice>& parts, bool allow_rest) {
  const int64_t bc = quant_.block_cols;
  auto keeps = [&](const Slice& s) {
    const std::string n = slice_name(s);
    const bool fp8 = dummy() ? !quant_.listed_not_converted(n) : quantised(n);
    return fp8 && s.full.size() == 2 && (s.dim == 0 || s.begin % bc == 0);
  };
  // A dummy load on the CPU that does not keep them makes the same codes and takes their floats,
  // as it does for the experts: the CPU and CUDA models of one dummy config are the same model.
  const bool floats = !keep_fp8_dense_ && dummy() && device_ == Device::kCpu;
  size_t run = 0;
  if ((keep_fp8_dense_ || floats) && quant_.method == WeightQuant::Method::kFp8Block) {
    while (run < parts.size() && keeps(parts[run])) ++run;
  }
  // The kept parts share their columns: whole rows of one width, or one column slice.
  if (run > 1) {
    for (size_t i = 0; i < run; ++i) {
      if (parts[i].dim != 0 || parts[i].full[1] != parts[0].full[1]) run = 0;
    }
  }
  if (run < parts.size() && !allow_rest) run = 0;
  Fp8Split out;
  if (run == 0) {
    out.rest = get_slices(parts);
    return out;
  }
  const Slice& first = parts[0];
  const Range cols = first.dim == 1 ? Range{first.begin, first.count} : Range{0, first.full[1]};
  int64_t rows = 0;
  std::vector<Fp8Part> kept;
  for (size_t i = 0; i < run; ++i) {
    const Slice& s = parts[i];
    const int64_t r0 = s.dim == 0 ? s.begin : 0, n = slice_shape(s)[0];
    kept.push_back({slice_name(s), s.full, 0, r0, n});
    rows += n;
  }
  out.fp8 = dummy() ? random_fp8(slice_name(first), {rows, cols.count})
                    : kept_fp8(kept, 1, cols).reshape({rows, cols.count});
  if (run < parts.size()) out.rest = get_slices(std::vector<Slice>(parts.begin() + int64_t(run), parts.end()));
  if (floats) {
    Tensor all = Tensor::empty({rows + (out.rest.defined() ? out.rest.dim(0) : 0), cols.count}, DType::kF32);
    const Tensor f = out.fp8.to_f32();
    std::memcpy(all.raw(), f.raw(), f.nbytes());
    if (out.rest.defined()) std::memcpy(all.data<float>() + f.numel(), out.rest.raw(), out.rest.nbytes());
    bytes_ += all.nbytes();
    bytes_ -= out.fp8.nbytes() + out.fp8.scale().nbytes() + (out.rest.defined() ? out.rest.nbytes() : 0);
    return {Tensor(), all};
  }
  return out;
}

Tensor slice_experts(const Tensor& stored, int64_t expert_begin, int64_t expert_count,
                     const std::vector<std::pair<int64_t, int64_t>>& rows, std::pair<int64_t, int64_t> cols,
                     const std::string& what) {
  STRATA_CHECK(stored.device() == Device::kCpu, what, ": experts ", stored.describe(), " are not on the CPU");
  const std::vector<CopyBlock> blocks = expert_blocks(static_cast<const char*>(stored.raw()), stored.dtype(),
                                                      stored.shape(), expert_begin, expert_count, rows, cols, what);
  int64_t out_rows = 0;
  for (const auto& r : rows) out_rows += r.second;
  Tensor out = Tensor::empty({expert_count, out_rows, cols.second}, DType::kF32);
  copy_blocks(blocks, 0, out.numel(), out.raw(), DType::kF32);
  return out;
}

bool WeightLoader::random_experts(const std::string& p, int64_t h, Range experts, Range inter, bool keep,
                                  Tensor (WeightLoader::*random_kept)(const std::string&, const Shape&),
                                  RoutedExperts& r) {
  const std::string fused_gu = prefix_ + p + "experts.gate_up_proj";
  if (quant_.listed_not_converted(fused_gu) || (!keep && device_ != Device::kCpu)) return false;
  r.gate_up = (this->*random_kept)(fused_gu, {experts.count, 2 * inter.count, h});
  r.down = (this->*random_kept)(prefix_ + p + "experts.down_proj", {experts.count, h, inter.count});
  if (!keep) {
    for (Tensor* t : {&r.gate_up, &r.down}) {
      const Tensor global = t->global_scale();
      bytes_ -= t->nbytes() + t->scale().nbytes() + (global.defined() ? global.nbytes() : 0);
      *t = t->to_f32();
      bytes_ += t->nbytes();
    }
  }
  return true;
}

bool WeightLoader::keep_experts_fp8(const std::string& p, const Shape& gate_up_shape, Range experts, Range inter,
                                    RoutedExperts& r) {
  const int64_t e = gate_up_shape.at(0), full_inter = gate_up_shape.at(1) / 2, h = gate_up_shape.at(2);
  if (dummy()) return random_experts(p, h, experts, inter, keep_fp8_experts_, &WeightLoader::random_fp8, r);
  const std::string fused_gu = prefix_ + p + "experts.gate_up_proj", fused_down = prefix_ + p + "experts.down_proj";
  std::vector<Fp8Part> gate_up, down;
  if (ckpt_.has(fused_gu)) {
    if (!quantised(fused_gu) || !quantised(fused_down)) return false;
    const Shape down_shape{e, h, full_inter};
    for (int64_t j = experts.begin; j < experts.begin + experts.count; ++j) {
      gate_up.push_back({fused_gu, gate_up_shape, j, inter.begin, inter.count});
      gate_up.push_back({fused_gu, gate_up_shape, j, full_inter + inter.begin, inter.count});
      down.push_back({fused_down, down_shape, j, 0, h});
    }
  } else {
    auto name = [&](int64_t j, const char* proj) { return cat(prefix_, p, "experts.", j, ".", proj, ".weight"); };
    for (int64_t j = 0; j < e; ++j) {
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        if (!quantised(name(j, proj))) return false;
      }
    }
    for (int64_t j = 0; j < e; ++j) {
      const bool ours = j >= experts.begin && j < experts.begin + experts.count;
      const Shape in_shape{full_inter, h}, out_shape{h, full_inter};
      if (!ours) {  // another rank's: checked and marked only
        for (const auto& [proj, shape] : {std::pair{"gate_proj", in_shape}, std::pair{"up_proj", in_shape},
                                          std::pair{"down_proj", out_shape}}) {
          fp8_scales(name(j, proj), stored(name(j, proj), shape, false));
        }
        continue;
      }
      gate_up.push_back({name(j, "gate_proj"), in_shape, 0, inter.begin, inter.count});
      gate_up.push_back({name(j, "up_proj"), in_shape, 0, inter.begin, inter.count});
      down.push_back({name(j, "down_proj"), out_shape, 0, 0, h});
    }
  }
  r.gate_up = kept_fp8(gate_up, experts.count, {0, h});
  r.down = kept_fp8(down, experts.count, inter);
  return true;
}

WeightLoader::RoutedExperts WeightLoader::get_routed_experts(const std::string& p, const Shape& gate_up_shape,
                                                             Range experts, Range inter) {
  const int64_t e = gate_up_shape.at(0), full_inter = gate_up_shape.at(1) / 2, h = gate_up_shape.at(2);
  RoutedExperts r;
  if ((keep_fp8_experts_ || dummy()) && quant_.method == WeightQuant::Method::kFp8Block &&
      inter.begin % quant_.block_cols == 0 && keep_experts_fp8(p, gate_up_shape, experts, inter, r)) {
    return r;
  }
  const bool fp4 = quant_.method == WeightQuant::Method::kNvfp4 || quant_.method == WeightQuant::Method::kMxfp4;
  if ((keep_fp4_experts_ || dummy()) && fp4 && keep_experts_fp4(p, gate_up_shape, experts, inter, r)) return r;
  if (dummy() || has(p + "experts.gate_up_proj")) {
    r.gate_up = get_expert_slices(p + "experts.gate_up_proj", gate_up_shape, experts,
                                  {{inter.begin, inter.count}, {full_inter + inter.begin, inter.count}}, {0, h});
    r.down = get_expert_slices(p + "experts.down_proj", {e, h, full_inter}, experts, {{0, h}}, inter);
    return r;
  }
  std::vector<CopyBlock> gate_up, down;
  for (int64_t j = 0; j < e; ++j) {
    const std::string q = prefix_ + p + cat("experts.", j, ".");
    const std::string gn = q + "gate_proj.weight", un = q + "up_proj.weight", dn = q + "down_proj.weight";
    const bool ours = j >= experts.begin && j < experts.begin + experts.count;
    if (!ours) {  // another rank's: checked and marked only (a quantised one with its scales)
      for (const auto& [n, shape] : {std::pair{&gn, Shape{full_inter, h}}, std::pair{&un, Shape{full_inter, h}},
                                     std::pair{&dn, Shape{h, full_inter}}}) {
        if (quantised(*n)) {
          source(*n, shape);
          dequantised_.erase(*n);
        } else {
          stored(*n, shape, true);
        }
      }
      continue;
    }
    for (const std::string* name : {&gn, &un}) {
      const Source in = source(*name, {full_inter, h});
      const std::vector<CopyBlock> b =
          expert_blocks(in.data, in.dtype, {full_inter, h}, 0, 1, {{inter.begin, inter.count}}, {0, h}, *name);
      gate_up.insert(gate_up.end(), b.begin(), b.end());
    }
    const Source d = source(dn, {h, full_inter});
    const std::vector<CopyBlock> b =
        expert_blocks(d.data, d.dtype, {h, full_inter}, 0, 1, {{0, h}}, {inter.begin, inter.count}, dn);
    down.insert(down.end(), b.begin(), b.end());
  }
  r.gate_up = assemble({experts.count, 2 * inter.count, h}, gate_up);
  r.down = assemble({experts.count, h, inter.count}, down);
  return r;
}

Tensor WeightLoader::get_expert_slices(const std::string& name, const Shape& full, Range experts,
                                       const std::vector<Range>& rows, Range cols) {
  const std::string full_name = prefix_ + name;
  STRATA_CHECK(full.size() == 3, full_name, ": fused experts must be [E, R, C], got ", shape_str(full));
  std::vector<std::pair<int64_t, int64_t>> row_ranges;
  int64_t out_rows = 0;
  for (const Range& r : rows) {
    row_ranges.emplace_back(r.begin, r.count);
    out_rows += r.count;
  }
  if (dummy()) return random(full_name, {experts.count, out_rows, cols.count});
  const Source src = source(full_name, full);
  return assemble({experts.count, out_rows, cols.count},
                  expert_blocks(src.data, src.dtype, full, experts.begin, experts.count, row_ranges,
                                {cols.begin, cols.count}, ckpt_.file_of(full_name) + ": tensor '" + full_name + "'"));
}

std::vector<std::string> WeightLoader::unused(const std::vector<std::string>& ignored) const {
  std::vector<std::string> out;
  if (dummy()) return out;
  for (const std::string& n : ckpt_.names()) {
    if (used_.count(n)) continue;
    bool skip = false;
    for (const std::string& p : ignored) skip = skip || n.rfind(p, 0) == 0;
    if (!skip) out.push_back(n);
  }
  return out;
}

void WeightLoader::refuse_unused_under(const std::string& prefix, const std::string& what) const {
  for (const std::string& name : unused({})) {
    STRATA_CHECK(name.rfind(prefix, 0) != 0, ckpt_.dir(), ": unexpected tensor '", name, "' of the ", what);
  }
}

}  // namespace strata
