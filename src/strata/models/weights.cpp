#include "strata/models/weights.h"

#include "strata/core/error.h"

namespace strata {

WeightLoader::WeightLoader(const Checkpoint& ckpt, std::string prefix, Device device)
    : ckpt_(ckpt), prefix_(std::move(prefix)), device_(device) {}

std::string WeightLoader::detect_prefix(const Checkpoint& ckpt) {
  for (const char* p : {"model.language_model.", "model.", "language_model.model.", ""}) {
    if (ckpt.has(std::string(p) + "embed_tokens.weight")) return p;
  }
  fail(ckpt.dir(), ": missing tensor 'model.embed_tokens.weight' (also looked for ",
       "'model.language_model.embed_tokens.weight')");
}

Tensor WeightLoader::raw(const std::string& full_name, const Shape& shape) {
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
  Tensor stored = raw(full_name, shape);
  const DType t = stored.dtype();
  STRATA_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16,
               ckpt_.file_of(full_name), ": tensor '", full_name, "': dtype ", dtype_name(t),
               " needs a quantised loader (expected BF16, F16 or F32)");
  return to_device(stored.to_f32());
}

Tensor WeightLoader::to_device(const Tensor& cpu_f32) const {
  STRATA_CHECK(device_ == Device::kCpu, "WeightLoader: the CUDA backend is not built in");
  const_cast<WeightLoader*>(this)->bytes_ += cpu_f32.nbytes();
  return cpu_f32;
}

std::vector<std::string> WeightLoader::unused(const std::vector<std::string>& ignored) const {
  std::vector<std::string> out;
  for (const std::string& n : ckpt_.names()) {
    if (used_.count(n)) continue;
    bool skip = false;
    for (const std::string& p : ignored) skip = skip || n.rfind(p, 0) == 0;
    if (!skip) out.push_back(n);
  }
  return out;
}

}  // namespace strata
