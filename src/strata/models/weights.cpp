#include "strata/models/weights.h"

#include <algorithm>
#include <cstring>

#include "strata/core/error.h"
#include "strata/ops/ops.h"

namespace strata {

WeightLoader::WeightLoader(const Checkpoint& ckpt, std::string prefix, Device device)
    : ckpt_(ckpt), prefix_(std::move(prefix)), device_(device) {}

std::string WeightLoader::detect_prefix(const Checkpoint& ckpt) {
  if (ckpt.weightless()) return "model.";
  for (const char* p : {"model.language_model.", "model.", "language_model.model.", ""}) {
    if (ckpt.has(std::string(p) + "embed_tokens.weight")) return p;
  }
  fail(ckpt.dir(), ": missing tensor 'model.embed_tokens.weight' (also looked for ",
       "'model.language_model.embed_tokens.weight')");
}

Tensor WeightLoader::raw(const std::string& full_name, const Shape& shape) {
  STRATA_CHECK(!dummy(), ckpt_.dir(), ": tensor '", full_name,
               "' must be read as stored, which --load-format dummy cannot do");
  const TensorInfo& info = ckpt_.info(full_name);
  STRATA_CHECK(info.shape == shape, ckpt_.file_of(full_name), ": tensor '", full_name,
               "': expected shape ", shape_str(shape), ", got ", shape_str(info.shape));
  used_.insert(full_name);
  return ckpt_.get(full_name);
}

Tensor WeightLoader::get(const std::string& name, const Shape& shape) {
  return get_top(prefix_ + name, shape);
}

Tensor WeightLoader::get_top(const std::string& full_name, const Shape& shape) {
  if (dummy()) return random(full_name, shape);
  Tensor stored = raw(full_name, shape);
  const DType t = stored.dtype();
  STRATA_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16,
               ckpt_.file_of(full_name), ": tensor '", full_name, "': dtype ", dtype_name(t),
               " needs a quantised loader (expected BF16, F16 or F32)");
  return to_device(stored.to_f32());
}

DType WeightLoader::device_dtype(const Shape& shape) const {
  return device_ == Device::kCuda && shape.size() >= 2 ? DType::kBF16 : DType::kF32;
}

Tensor WeightLoader::to_device(const Tensor& cpu_f32) const {
  auto* self = const_cast<WeightLoader*>(this);
  if (device_ == Device::kCpu) {
    self->bytes_ += cpu_f32.nbytes();
    return cpu_f32;
  }
  Tensor host = cpu_f32;
  if (device_dtype(cpu_f32.shape()) == DType::kBF16) {
    host = Tensor::empty(cpu_f32.shape(), DType::kBF16);
    const float* src = cpu_f32.data<float>();
    uint16_t* dst = host.data<uint16_t>();
    for (int64_t i = 0; i < host.numel(); ++i) dst[i] = f32_to_bf16(src[i]);
  }
  self->bytes_ += host.nbytes();
  return host.to(device_);
}

Tensor WeightLoader::random(const std::string& name, const Shape& shape) {
  // HF's initializer_range 0.02 as the standard deviation of a uniform distribution.
  constexpr float kScale = 0.0346f;
  uint64_t seed = 1469598103934665603ull;  // FNV-1a of the name: stable across runs
  for (unsigned char c : name) seed = (seed ^ c) * 1099511628211ull;
  Tensor t = Tensor::empty(shape, device_dtype(shape), device_);
  ops::fill_random_uniform(t, seed, kScale);
  bytes_ += t.nbytes();
  return t;
}

Tensor WeightLoader::get_slices(const std::vector<Slice>& parts) {
  STRATA_CHECK(!parts.empty(), "get_slices: no tensors");
  std::vector<Tensor> pieces;
  Shape total;
  for (const Slice& s : parts) {
    const std::string full_name = s.top ? s.name : prefix_ + s.name;
    STRATA_CHECK((s.dim == 0 || (s.dim == 1 && s.full.size() == 2)) && s.begin >= 0 && s.count > 0 &&
                     s.begin + s.count <= s.full[size_t(s.dim)],
                 full_name, ": shard [", s.begin, ", ", s.begin + s.count, ") along dimension ", s.dim,
                 " does not fit ", shape_str(s.full));
    Shape shape = s.full;
    shape[size_t(s.dim)] = s.count;
    if (total.empty()) {
      total = shape;
    } else {
      STRATA_CHECK(shape.size() == total.size() && std::equal(total.begin() + 1, total.end(), shape.begin() + 1),
                   "get_slices: '", full_name, "' ", shape_str(shape), " does not stack on ", shape_str(total));
      total[0] += shape[0];
    }
    if (dummy()) continue;
    Tensor stored = raw(full_name, s.full);
    const DType t = stored.dtype();
    STRATA_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16, ckpt_.file_of(full_name),
                 ": tensor '", full_name, "': dtype ", dtype_name(t),
                 " needs a quantised loader (expected BF16, F16 or F32)");
    if (s.dim == 0 || (s.begin == 0 && s.count == s.full[1])) {
      pieces.push_back(stored.rows(s.begin, s.dim == 0 ? s.begin + s.count : s.full[0]).to_f32());
    } else {
      Tensor cols = Tensor::empty(shape, DType::kF32);
      for (int64_t r = 0; r < s.full[0]; ++r) {
        Tensor row = stored.rows(r, r + 1).to_f32();
        std::memcpy(cols.data<float>() + r * s.count, row.data<float>() + s.begin, size_t(s.count) * sizeof(float));
      }
      pieces.push_back(cols);
    }
  }
  if (dummy()) return random((parts[0].top ? "" : prefix_) + parts[0].name, total);
  Tensor out = Tensor::empty(total, DType::kF32);
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor& piece : pieces) {
    std::memcpy(dst, piece.raw(), piece.nbytes());
    dst += piece.nbytes();
  }
  return to_device(out);
}

Tensor slice_experts(const Tensor& stored, int64_t expert_begin, int64_t expert_count,
                     const std::vector<std::pair<int64_t, int64_t>>& rows, std::pair<int64_t, int64_t> cols,
                     const std::string& what) {
  STRATA_CHECK(stored.ndim() == 2 || stored.ndim() == 3, what, ": experts ", stored.describe(), " are not [E, R, C]");
  const Tensor t = stored.ndim() == 2 ? stored.reshape({1, stored.dim(0), stored.dim(1)}) : stored;
  const int64_t e = t.dim(0), r = t.dim(1), c = t.dim(2);
  const auto [col_begin, col_count] = cols;
  STRATA_CHECK(expert_begin >= 0 && expert_count > 0 && expert_begin + expert_count <= e && col_begin >= 0 &&
                   col_count > 0 && col_begin + col_count <= c,
               what, ": shard of experts [", expert_begin, ", ", expert_begin + expert_count, ") columns [",
               col_begin, ", ", col_begin + col_count, ") does not fit ", t.describe());
  int64_t out_rows = 0;
  for (const auto& [b, n] : rows) {
    STRATA_CHECK(b >= 0 && n > 0 && b + n <= r, what, ": rows [", b, ", ", b + n, ") do not fit ", t.describe());
    out_rows += n;
  }
  Tensor out = Tensor::empty({expert_count, out_rows, col_count}, DType::kF32);
  const Tensor flat = t.reshape({e * r, c});
  float* dst = out.data<float>();
  for (int64_t j = expert_begin; j < expert_begin + expert_count; ++j) {
    for (const auto& [b, n] : rows) {
      if (col_count == c) {  // whole rows: one conversion
        const Tensor block = flat.rows(j * r + b, j * r + b + n).to_f32();
        std::memcpy(dst, block.data<float>(), block.nbytes());
        dst += n * c;
        continue;
      }
      for (int64_t i = j * r + b; i < j * r + b + n; ++i) {
        const Tensor row = flat.rows(i, i + 1).to_f32();
        std::memcpy(dst, row.data<float>() + col_begin, size_t(col_count) * sizeof(float));
        dst += col_count;
      }
    }
  }
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.dim(0);
  Shape shape = parts.at(0).shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, DType::kF32);
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

WeightLoader::RoutedExperts WeightLoader::get_routed_experts(const std::string& p, const Shape& gate_up_shape,
                                                             Range experts, Range inter) {
  const int64_t e = gate_up_shape.at(0), full_inter = gate_up_shape.at(1) / 2, h = gate_up_shape.at(2);
  RoutedExperts r;
  if (dummy() || has(p + "experts.gate_up_proj")) {
    r.gate_up = get_expert_slices(p + "experts.gate_up_proj", gate_up_shape, experts,
                                  {{inter.begin, inter.count}, {full_inter + inter.begin, inter.count}}, {0, h});
    r.down = get_expert_slices(p + "experts.down_proj", {e, h, full_inter}, experts, {{0, h}}, inter);
    return r;
  }
  std::vector<Tensor> gate_up, down;
  for (int64_t j = 0; j < e; ++j) {
    const std::string q = prefix_ + p + cat("experts.", j, ".");
    const Tensor g = raw(q + "gate_proj.weight", {full_inter, h}), u = raw(q + "up_proj.weight", {full_inter, h}),
                 d = raw(q + "down_proj.weight", {h, full_inter});
    if (j < experts.begin || j >= experts.begin + experts.count) continue;  // another rank's: checked and marked only
    gate_up.push_back(slice_experts(g, 0, 1, {{inter.begin, inter.count}}, {0, h}, q + "gate_proj.weight"));
    gate_up.push_back(slice_experts(u, 0, 1, {{inter.begin, inter.count}}, {0, h}, q + "up_proj.weight"));
    down.push_back(slice_experts(d, 0, 1, {{0, h}}, {inter.begin, inter.count}, q + "down_proj.weight"));
  }
  r.gate_up = to_device(concat_rows(gate_up).reshape({experts.count, 2 * inter.count, h}));
  r.down = to_device(concat_rows(down).reshape({experts.count, h, inter.count}));
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
  Tensor stored = raw(full_name, full);
  const DType t = stored.dtype();
  STRATA_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16, ckpt_.file_of(full_name), ": tensor '",
               full_name, "': dtype ", dtype_name(t), " needs a quantised loader (expected BF16, F16 or F32)");
  return to_device(slice_experts(stored, experts.begin, experts.count, row_ranges, {cols.begin, cols.count},
                                 ckpt_.file_of(full_name) + ": tensor '" + full_name + "'"));
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

}  // namespace strata
