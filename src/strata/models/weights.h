// Reading a family's weights out of a Checkpoint: names under the language-model prefix,
// expected shapes checked, converted to the compute dtype of the target device.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/io/checkpoint.h"

namespace strata {

// Of a stored [E, R, C] tensor (any float dtype, on the CPU; [R, C] counts as one expert),
// experts [experts.begin, + count), of each the row ranges `rows` concatenated and the columns
// `cols`: float32 [experts.count, sum of the rows' counts, cols.count] on the CPU. `what` names
// the tensor in errors.
Tensor slice_experts(const Tensor& stored, int64_t expert_begin, int64_t expert_count,
                     const std::vector<std::pair<int64_t, int64_t>>& rows, std::pair<int64_t, int64_t> cols,
                     const std::string& what);

// Concatenates CPU float32 tensors along dimension 0.
Tensor concat_rows(const std::vector<Tensor>& parts);

class WeightLoader {
 public:
  // `prefix` is where the language model's weights live: "model." for the *ForCausalLM
  // checkpoints, "model.language_model." for the multimodal wrappers (detected by
  // detect_prefix).
  WeightLoader(const Checkpoint& ckpt, std::string prefix, Device device);

  static std::string detect_prefix(const Checkpoint& ckpt);

  const Checkpoint& checkpoint() const { return ckpt_; }
  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& name) const { return ckpt_.has(prefix_ + name); }
  bool has_top(const std::string& full_name) const { return ckpt_.has(full_name); }

  // prefix + name, checked against `shape`, in the device's compute dtype.
  Tensor get(const std::string& name, const Shape& shape);
  // A top-level tensor (e.g. "lm_head.weight"), checked against `shape`.
  Tensor get_top(const std::string& full_name, const Shape& shape);
  // As stored (any dtype, CPU view), checked against `shape`; marks it used.
  Tensor raw(const std::string& full_name, const Shape& shape);
  // Moves a CPU float32 tensor to the device's compute dtype: F32 on the CPU; on CUDA, BF16 for
  // tensors of rank >= 2 (the matrices, embeddings, conv kernels) and F32 for vectors (norm
  // weights, A_log, dt_bias: small, and read once per row).
  Tensor to_device(const Tensor& cpu_f32) const;
  // A tensor-parallel rank's shard: of each prefix + name tensor (top: the full name) of `full`
  // shape, the slice [begin, begin + count) along dimension `dim` (0, or 1 of a matrix), the
  // slices concatenated along dimension 0, on the device. Only the slice is converted. Also
  // fuses several projections of one input into one matrix (whole tensors, stacked).
  struct Slice {
    std::string name;
    Shape full;
    int dim = 0;
    int64_t begin = 0, count = 0;
    bool top = false;
  };
  Tensor get_slices(const std::vector<Slice>& parts);
  // A rank's share of fused experts `name` (prefix + name) of `full` shape [E, R, C]: experts
  // [experts.begin, + count), of each the row ranges `rows` (concatenated) and the columns
  // `cols`, as [experts.count, sum of the rows' counts, cols.count] on the device. Only the
  // slice is converted. (Tensor-parallel experts: gate and up rows, down columns.)
  struct Range {
    int64_t begin = 0, count = 0;
  };
  Tensor get_expert_slices(const std::string& name, const Shape& full, Range experts,
                           const std::vector<Range>& rows, Range cols);
  // The routed experts under `p` (e.g. "layers.3.mlp."), fused (experts.gate_up_proj [E, 2I, H],
  // experts.down_proj [E, H, I]) or per expert (experts.J.{gate,up,down}_proj.weight, every one
  // checked): of them the rank's `experts` and of each its intermediate columns `inter`, as
  // gate_up [experts.count, 2 inter.count, H] and down [experts.count, H, inter.count] on the
  // device.
  struct RoutedExperts {
    Tensor gate_up, down;
  };
  RoutedExperts get_routed_experts(const std::string& p, const Shape& gate_up_shape, Range experts, Range inter);
  // True for a config-only checkpoint (--load-format dummy): get() and get_slices() then return
  // seeded uniform random values of the requested shapes, generated on the device.
  bool dummy() const { return ckpt_.weightless(); }

  // Tensors of the checkpoint never read, minus the prefixes recognised as not ours
  // (e.g. "model.visual.", "mtp."). A non-empty result is an error for strict loading.
  std::vector<std::string> unused(const std::vector<std::string>& ignored_prefixes) const;
  size_t bytes_loaded() const { return bytes_; }

 private:
  DType device_dtype(const Shape& shape) const;
  Tensor random(const std::string& name, const Shape& shape);

  const Checkpoint& ckpt_;
  std::string prefix_;
  Device device_;
  std::set<std::string> used_;
  size_t bytes_ = 0;
};

}  // namespace strata
