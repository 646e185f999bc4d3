// Reading a family's weights out of a Checkpoint: names under the language-model prefix,
// expected shapes checked, converted to the compute dtype of the target device.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/block_copy.h"
#include "strata/core/tensor.h"
#include "strata/io/checkpoint.h"
#include "strata/io/quant_config.h"
#include "strata/io/load_progress.h"

namespace strata {

// Of a stored [E, R, C] tensor (any float dtype, on the CPU; [R, C] counts as one expert),
// experts [experts.begin, + count), of each the row ranges `rows` concatenated and the columns
// `cols`: float32 [experts.count, sum of the rows' counts, cols.count] on the CPU. `what` names
// the tensor in errors.
Tensor slice_experts(const Tensor& stored, int64_t expert_begin, int64_t expert_count,
                     const std::vector<std::pair<int64_t, int64_t>>& rows, std::pair<int64_t, int64_t> cols,
                     const std::string& what);

// Every weight is made in one pass from the mapped checkpoint to its destination: the stored
// bytes of the tensor, slice, concatenation or expert stack are described as blocks
// (core/block_copy.h) and written, converted on the way, by all CPU cores into the CPU tensor,
// or on CUDA through pinned staging buffers straight into the device tensor, converted there
// (ops/cuda/weight_upload.h). Device uploads are asynchronous until finish().
class WeightLoader {
 public:
  // `prefix` is where the language model's weights live: "model." for the *ForCausalLM
  // checkpoints, "model.language_model." for the multimodal wrappers (detected by
  // detect_prefix). `report_progress`: the load's progress line on stderr (io/load_progress.h;
  // tensor-parallel ranks other than 0 pass false).
  WeightLoader(const Checkpoint& ckpt, std::string prefix, Device device, bool report_progress = true);
  ~WeightLoader();
  WeightLoader(const WeightLoader&) = delete;
  WeightLoader& operator=(const WeightLoader&) = delete;

  static std::string detect_prefix(const Checkpoint& ckpt);
  // Reads quantised weights as `q` describes (weight_quant_of the checkpoint): F8_E4M3 ones of an
  // FP8 block-scale checkpoint, packed U8 ones of an NVFP4 one. The families that take them call
  // it before the first get(); without it such a weight is an error.
  void accept_quant(WeightQuant q) { quant_ = std::move(q); }
  // Whether get_routed_experts keeps the routed experts of an FP8 block-scale checkpoint as they
  // are stored, F8_E4M3 codes with their scales expanded per row (Tensor::with_scale, group 128),
  // instead of dequantising them: on CUDA (the MoE kernels read them so: half the bytes of bf16),
  // and on the CPU when asked (the CPU's MoE ops dequantise the chosen experts a call). Dummy
  // loads of an FP8 config make random codes (on the CPU, unless kept, as their floats). Experts left in bf16 by modules_to_not_convert, and
  // a tensor-parallel shard whose down_proj columns do not start on a 128-column block, are
  // dequantised (or converted) as before.
  void keep_fp8_experts(bool keep) { keep_fp8_experts_ = keep; }
  // Whether get_slices_fp8 keeps an FP8 block-scale checkpoint's dense projections FP8 (codes and
  // per-row scales, as the experts above): on CUDA, whose linear ops read them so.
  void keep_fp8_dense(bool keep) { keep_fp8_dense_ = keep; }
  // Whether get_routed_experts keeps the routed experts of an NVFP4 or MXFP4 checkpoint as they
  // are stored (Tensor::with_scale: F4_E2M1 codes, the scale bytes as stored, per row; NVFP4's
  // weight_scale_2 as an F32 a row, so that gate and up may differ) instead of dequantising them.
  // Kept when the hidden size and the rank's intermediate columns start and end on 32 columns
  // (whole 16-byte rows of codes a group pair), else dequantised as before. Dummy loads of such a
  // config make random codes and scales on the host (on the CPU, unless kept, as their floats: the
  // same model either way). Experts are per expert in these formats (X.weight is the name ModelOpt
  // and compressed-tensors quantise), never fused.
  void keep_fp4_experts(bool keep) { keep_fp4_experts_ = keep; }

  const Checkpoint& checkpoint() const { return ckpt_; }
  Device device() const { return device_; }
  const std::string& prefix() const { return prefix_; }
  // prefix + name is in the folder (an MXFP4 `X.weight` as its `X.weight_packed`).
  bool has(const std::string& name) const { return ckpt_.has(prefix_ + name) || packed_mxfp4(prefix_ + name); }
  bool has_top(const std::string& full_name) const { return ckpt_.has(full_name); }

  // prefix + name, checked against `shape`, in the device's compute dtype.
  Tensor get(const std::string& name, const Shape& shape);
  // A top-level tensor (e.g. "lm_head.weight"), checked against `shape`.
  Tensor get_top(const std::string& full_name, const Shape& shape);
  // As stored (any dtype, CPU view), checked against `shape`; marks it used.
  Tensor raw(const std::string& full_name, const Shape& shape);
  // Moves a CPU float32 tensor to the device's compute dtype: F32 on the CPU (the tensor itself);
  // on CUDA, BF16 for tensors of rank >= 2 (the matrices, embeddings, conv kernels) and F32 for
  // vectors (norm weights, A_log, dt_bias: small, and read once per row).
  Tensor to_device(const Tensor& cpu_f32);
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
  // get_slices for a projection that may stay FP8 (keep_fp8_dense): the longest leading run of
  // `parts` stored F8_E4M3 (dummy: not listed in modules_to_not_convert), whose column slices
  // start on a 128-column block, as one F8_E4M3 matrix with per-row scales (Tensor::with_scale,
  // group 128) in `fp8`, and the remaining parts as get_slices gives them in `rest` (undefined
  // when none). Without such a run (or not kept), or when the run is not every part and
  // `allow_rest` is false, `fp8` is undefined and `rest` holds every part.
  struct Fp8Split {
    Tensor fp8, rest;
  };
  Fp8Split get_slices_fp8(const std::vector<Slice>& parts, bool allow_rest);
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
  // True for a config-only checkpoint (--load-format dummy): get(), get_slices(),
  // get_expert_slices(), get_routed_experts() and get_host_f32() then return seeded uniform random
  // values of the requested shapes (random()), and raw() refuses.
  bool dummy() const { return ckpt_.weightless(); }
  // The dummy weight `full_name` of `shape`: uniform random values seeded by the name, on the
  // device in its compute dtype (random_host: in host memory as `dtype`, for what a real load
  // keeps in the host mapping, such as Qwen4-Exp's n-gram tables).
  Tensor random(const std::string& full_name, const Shape& shape);
  Tensor random_host(const std::string& full_name, const Shape& shape, DType dtype);
  // A top-level float tensor as CPU float32 whatever the device (for weights reworked on the host
  // before they go to the device); random under dummy().
  Tensor get_host_f32(const std::string& full_name, const Shape& shape);

  // Tensors of the checkpoint never read, minus the prefixes recognised as not ours
  // (e.g. "model.visual.", "mtp."). A non-empty result is an error for strict loading.
  std::vector<std::string> unused(const std::vector<std::string>& ignored_prefixes) const;
  // A head read by a loader of its own (the multi-token-prediction heads): an unread tensor under
  // `prefix` is an error naming it as part of `what`.
  void refuse_unused_under(const std::string& prefix, const std::string& what) const;
  size_t bytes_loaded() const { return bytes_; }
  // Waits for the device uploads queued so far (throws Error on a failed one), frees their
  // staging buffers and prints the closing progress line. The families call it once every
  // weight is read; the destructor waits too (ignoring errors) when a load fails half-way.
  void finish();

 private:
  DType device_dtype(const Shape& shape) const;
  // Values uniform in +-range, seeded by the name.
  Tensor random_on(const std::string& full_name, const Shape& shape, DType dtype, Device device, float range);
  // Checks the stored tensor against `shape` (and, with `float_only`, a BF16/F16/F32 dtype) and
  // marks it used.
  const TensorInfo& stored(const std::string& full_name, const Shape& shape, bool float_only);
  // Where a weight's elements are read from, and as what: the mapped bytes of a float tensor, or
  // for a quantised weight (F8_E4M3 of an FP8 block-scale checkpoint, U8 of an NVFP4 one) its F32
  // dequantisation (scales checked and marked read). Checked against `shape` (the unpacked one)
  // and marked used like stored().
  struct Source {
    const char* data;
    DType dtype;
  };
  Source source(const std::string& full_name, const Shape& shape);
  // A Slice's tensor name (prefix + name, or name when top), and its shape once sliced, checked
  // to fit the full shape.
  std::string slice_name(const Slice& s) const;
  Shape slice_shape(const Slice& s) const;
  // True when the stored tensor is a quantised weight of the accepted format.
  bool quantised(const std::string& full_name) const;
  // True when `full_name` ("X.weight") is stored as compressed-tensors' MXFP4 X.weight_packed.
  bool packed_mxfp4(const std::string& full_name) const;
  // INTERIM (issue 19): FP8 and NVFP4 weights are dequantised on the host at load and then
  // converted like bf16 ones; the GPU kernels that keep them compressed are the next phase. The
  // F32 copies live until finish(), when every upload reading them has completed.
  Tensor dequantise_fp8(const std::string& full_name, const TensorInfo& info);
  // The block scales of the F8_E4M3 weight `full_name` as stored (a CPU view), checked: the weight
  // not listed as not converted, the scale present, F32, of the block grid of the weight's shape.
  Tensor fp8_scales(const std::string& full_name, const TensorInfo& info);
  // Kept FP8 experts (keep_fp8_experts): each part is expert `expert` of the stored F8_E4M3
  // tensor `name` (full name; a matrix counts as expert 0) of shape `full`, its rows [row0, +
  // rows) and the columns `cols` (cols.begin a multiple of 128). The parts stack by rows into
  // experts_out experts; codes checked for NaN.
  struct Fp8Part {
    std::string name;
    Shape full;
    int64_t expert = 0, row0 = 0, rows = 0;
  };
  Tensor kept_fp8(const std::vector<Fp8Part>& parts, int64_t experts_out, Range cols);
  // get_routed_experts' FP8 path: fills r and returns true when the experts are stored F8_E4M3
  // (or, dummy, declared so), false to load them as floats.
  bool keep_experts_fp8(const std::string& p, const Shape& gate_up_shape, Range experts, Range inter,
                        RoutedExperts& r);
  // Random F8_E4M3 codes of a dummy FP8 load, with one scale for all: values uniform in about
  // +-0.0346, as random() gives.
  Tensor random_fp8(const std::string& full_name, const Shape& shape);
  // An NVFP4 or MXFP4 weight `full_name` ("X.weight") of logical shape [.., out, in] (a matrix, or
  // fused experts [E, out, in]), its tensors' names, dtypes and shapes checked (and the module not
  // listed as not converted) and marked read, as CPU views: codes U8 [.., out, in / 2] (NVFP4:
  // X.weight; MXFP4: X.weight_packed), scale bytes [.., out, in / group] (F8_E4M3; UE8M0 or U8),
  // and NVFP4's global F32 (one value, or one an expert; X.input_scale checked, unused). The values
  // are not checked here (io/quant.h's dequantisers do; kept_fp4 by check_fp4_scales).
  struct Fp4Stored {
    Tensor codes, scale, global;
    int group = 0;
    bool nvfp4 = true;
    std::string codes_name, scale_name, global_name;
  };
  Fp4Stored fp4_stored(const std::string& full_name, const Shape& shape);
  Tensor dequantise_nvfp4(const std::string& full_name, const Shape& shape);
  Tensor dequantise_mxfp4(const std::string& full_name, const Shape& shape);
  // Kept FP4 experts (keep_fp4_experts): each part is rows [row0, + rows) of the stored weight
  // `name` (an expert's matrix, "X.weight") of logical shape `full`, its columns `cols` (on
  // 32-column boundaries). The parts stack by rows into experts_out experts; every scale of the
  // parts' tensors checked (NaN, negative, a global not finite and positive), the first bad one
  // named by tensor, row and group.
  struct Fp4Part {
    std::string name;
    Shape full;
    int64_t row0 = 0, rows = 0;
  };
  Tensor kept_fp4(const std::vector<Fp4Part>& parts, int64_t experts_out, Range cols);
  void check_fp4_scales(const Fp4Stored& st);
  // get_routed_experts' FP4 path, as keep_experts_fp8.
  bool keep_experts_fp4(const std::string& p, const Shape& gate_up_shape, Range experts, Range inter,
                        RoutedExperts& r);
  // Random kept FP4 weights of a dummy NVFP4 / MXFP4 load, made on the host and seeded by the
  // name: uniform code bytes; NVFP4 scale bytes uniform in [0x70, 0x7e] (128 .. 448) with the global
  // kRandomRange / (6 x 448), MXFP4 exponents 118 or 119: values within random()'s +-0.0346.
  Tensor random_fp4(const std::string& full_name, const Shape& shape);
  // get_routed_experts' dummy kept experts (keep_experts_fp8 / _fp4): gate_up and down of the
  // rank's experts as `random_kept` makes them, seeded by the fused names; on the CPU, unless
  // `keep`, their floats (the same weights either way). False when not made: listed as not
  // converted, or not kept on a GPU.
  bool random_experts(const std::string& p, int64_t h, Range experts, Range inter, bool keep,
                      Tensor (WeightLoader::*random_kept)(const std::string&, const Shape&), RoutedExperts& r);
  // A host tensor copied to the device as it is (a kept weight's scales).
  Tensor upload(const Tensor& host);
  // A new tensor of `shape` in the device's compute dtype (assemble_as: `dtype`) holding the
  // blocks' elements.
  Tensor assemble(const Shape& shape, const std::vector<CopyBlock>& blocks);
  Tensor assemble_as(const Shape& shape, DType dtype, const std::vector<CopyBlock>& blocks);

  const Checkpoint& ckpt_;
  std::string prefix_;
  Device device_;
  std::set<std::string> used_;
  WeightQuant quant_;                          // quantization_config
  bool keep_fp8_experts_ = false, keep_fp8_dense_ = false, keep_fp4_experts_ = false;
  std::map<std::string, Tensor> dequantised_;  // quantised weights as F32, until finish()
  size_t bytes_ = 0;
  LoadProgress progress_;
  std::unique_ptr<BlockWriter> writer_;  // made at the first write
};

}  // namespace strata
