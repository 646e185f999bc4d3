// The model contract: what a family declares (ModelInfo, CacheSpec) and how it runs
// (Model::forward over a ForwardBatch and the engine's cache pools).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/dist/communicator.h"
#include "strata/ops/ops.h"

namespace strata {

// One cache tensor that grows with the sequence, stored in the pages of the sequence's block
// table. An entry covers `tokens_per_entry` tokens (1 for plain KV, 4 or 128 for compressed KV).
// Pool tensor: [num_blocks, entries_per_block(block_size), ...per_entry]. Entry e of a sequence
// lives in page block_table[e * tokens_per_entry / block_size] at row
// (e * tokens_per_entry % block_size) / tokens_per_entry (row 0 when an entry spans pages).
struct PagedCacheSpec {
  std::string name;  // "k", "v", ...
  Shape per_entry;   // e.g. [kv_heads, head_dim]
  DType dtype = DType::kF32;
  int tokens_per_entry = 1;
  int entries_per_block(int block_size) const {
    return tokens_per_entry >= block_size ? 1 : block_size / tokens_per_entry;
  }
};

// One fixed-size per-sequence cache tensor (recurrent state, conv state, ...): a pool tensor
// [num_slots, ...shape].
struct SlotCacheSpec {
  std::string name;  // "ssm", "conv", ...
  Shape shape;
  DType dtype = DType::kF32;
};

struct LayerCacheSpec {
  std::vector<PagedCacheSpec> paged;
  std::vector<SlotCacheSpec> slots;
};

struct CacheSpec {
  std::vector<LayerCacheSpec> layers;
  size_t bytes_per_block(int block_size) const;  // all paged tensors of all layers
  size_t bytes_per_slot() const;   // all slot tensors of all layers
};

// The pools the engine owns and the model reads and writes.
struct LayerCaches {
  std::vector<Tensor> paged;  // [num_blocks, block_size, ...per_token], same order as the spec
  std::vector<Tensor> slots;  // [num_slots, ...shape]
};

struct Caches {
  int block_size = 16;
  int num_blocks = 0;
  int num_slots = 0;
  std::vector<LayerCaches> layers;
  // A tensor-parallel model's other ranks' pools (rank r's at peers[r - 1]), with the same
  // block and slot numbering: the engine addresses one page or slot id on every rank.
  std::vector<Caches> peers;

  static Caches allocate(const CacheSpec& spec, int num_blocks, int block_size, int num_slots,
                         Device device);
  // Every slot tensor (copy_slot) or paged tensor (copy_page) of every layer: pool[dst] =
  // pool[src], here and on every peer (state snapshots, copy-on-fork of a partly filled page).
  void copy_slot(int32_t src, int32_t dst);
  // copy_slot for several independent pairs at once (ops::copy_slots).
  void copy_slots(const std::vector<ops::SlotCopy>& copies);
  // copy_slots from a source the device picks: slot copies[i].src + select[i] when select[i] <
  // limit (ops::copy_slots_selected); this rank only (speculative decoding runs without peers).
  void copy_slots_selected(const std::vector<ops::SlotCopy>& copies, const Tensor& select, int32_t limit);
  void copy_page(int32_t src, int32_t dst);
};

struct ModelInfo {
  std::string model_type;  // the HF model_type of the language model
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t max_position_embeddings = 0;
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;
  CacheSpec cache;
  size_t weight_bytes = 0;  // as loaded on the device
  // The CUDA forward of a decode batch can be captured as a CUDA graph: no host syncs, and the
  // same launches and workspace whatever the batch's contents (engine/model_runner.h). It also
  // reads the token ids only on the device, so the engine may feed them there (core/batch.h).
  bool cuda_graphs = false;
  // Likewise a speculative verify batch (every sequence a few tokens, forward_with_hidden over
  // every row): the multi-token forward is capture-safe too (ops::cuda::DecodeGraphs).
  // These two also speak for the draft head (mtp_forward_with_hidden): its decode-shaped steps
  // (one token a sequence) may run as graphs when cuda_graphs is set, and its multi-token ones
  // (every sequence a few tokens, the last one's logits) when verify_graphs is.
  bool verify_graphs = false;
  // Speculative decoding rolls a rejected draft's recurrent state back by copying the state the
  // verify stored after the last accepted token (ForwardBatch::state_steps), for batches whose
  // sequences bring at most this many tokens; 0: the model does not store them (the engine then
  // checkpoints the state and replays the accepted tokens).
  int32_t state_step_tokens = 0;
  // The multi-token-prediction (draft) head, when loaded (LoadOptions::mtp): its layers, and
  // their caches, which a Caches for drafting holds after cache.layers (allocate_caches with
  // with_mtp).
  int64_t mtp_layers = 0;
  std::vector<LayerCacheSpec> mtp_cache;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual Device device() const = 0;
  // Runs the batch; writes float32 logits [batch.logit_rows.size(), vocab] into `logits`
  // (allocated by the model when undefined or of the wrong shape).
  virtual void forward(const ForwardBatch& batch, Caches& caches, Tensor& logits) = 0;
  // The pools forward() reads and writes: Caches::allocate of info().cache on device(); a
  // tensor-parallel model (models/parallel_model.h) adds its other ranks' pools as peers.
  virtual Caches allocate_caches(int num_blocks, int block_size, int num_slots) const;

  // ---- the multi-token-prediction head (info().mtp_layers > 0; else these throw Error) ----
  // forward(), and also `hidden` [T, hidden_size]: the final-norm hidden state of every token
  // row, which the head reads. forward() accepts caches with the head's layers too.
  virtual void forward_with_hidden(const ForwardBatch& batch, Caches& caches, Tensor& logits, Tensor& hidden);
  // The head over `batch`: row i pairs hidden[i], the main model's state at position p, with
  // token_ids[i], the token at p + 1, at positions[i] = p; its layers' KV in
  // caches.layers[num_layers + j]. Writes the logits of batch.logit_rows (the draft of the
  // token at p + 2).
  virtual void mtp_forward(const ForwardBatch& batch, const Tensor& hidden, Caches& caches, Tensor& logits);
  // mtp_forward, and also `hidden_out` [T, hidden_size]: the head's own final-norm state of every
  // row, which stands in for the main model's state when drafts are chained (the head's input at
  // the next position; vLLM's MTP proposer does the same).
  virtual void mtp_forward_with_hidden(const ForwardBatch& batch, const Tensor& hidden, Caches& caches,
                                       Tensor& logits, Tensor& hidden_out);
  // The head's KV at the batch's positions and nothing else: the cache contents mtp_forward
  // leaves, without its outputs (the engine's catch-ups of deferred head forwards, whose logits
  // nobody reads). By default mtp_forward itself, its logits dropped; a family may stop at its
  // last head layer's keys and values.
  virtual void mtp_write_kv(const ForwardBatch& batch, const Tensor& hidden, Caches& caches);
  // The pools of allocate_caches plus the head's layers after them (with_mtp).
  Caches allocate_caches(int num_blocks, int block_size, int num_slots, bool with_mtp) const;
};

// Loads a checkpoint folder, picking the family from config.json (models/registry.cpp).
std::unique_ptr<Model> load_model(const std::string& dir, Device device = Device::kCpu);

// Where the weights come from: the folder's safetensors, or (kDummy, `--load-format dummy`)
// nowhere: a folder holding only config.json gets seeded uniform random weights of the real
// shapes, made on the device (benchmarks at real sizes without checkpoints).
enum class LoadFormat { kSafetensors, kDummy };
// The attention layers' paged KV cache (--kv-cache-dtype): kAuto, the activations' dtype
// (float32 on the CPU, bfloat16 on CUDA); kFp8E4M3, e4m3 codes and a power-of-two scale a
// (token, kv head) vector, about half bfloat16's bytes (ops/kv_fp8.h).
enum class KvCacheDtype { kAuto, kFp8E4M3 };
struct LoadOptions {
  Device device = Device::kCpu;
  LoadFormat format = LoadFormat::kSafetensors;
  // Tensor/expert parallelism: which shard this rank loads and runs (size 1: the whole model).
  dist::Parallel parallel;
  // Load the multi-token-prediction head (mtp.*) too, for speculative decoding; an Error when
  // the checkpoint has none. Without it the head's tensors are skipped.
  bool mtp = false;
  // The dtype of the Gated DeltaNet recurrent state slots ("ssm"; `--mamba-ssm-dtype`): kF32, or
  // kBF16 to halve their bytes (every op loads the state to fp32, computes in fp32 and rounds
  // once, to nearest even, when it stores it). Families without a recurrent state ignore it.
  DType ssm_state_dtype = DType::kF32;
  // The KV cache's storage (--kv-cache-dtype). kFp8E4M3: the Qwen3.5 family only so far; the
  // other families refuse it by name.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
};
std::unique_ptr<Model> load_model(const std::string& dir, const LoadOptions& options);
// "auto" or "safetensors" -> kSafetensors, "dummy" -> kDummy; an Error naming --load-format else.
LoadFormat parse_load_format(const std::string& name);
// "float32" -> kF32, "bfloat16" -> kBF16; an Error naming --mamba-ssm-dtype else.
DType parse_ssm_state_dtype(const std::string& name);
// "auto" -> kAuto, "fp8" or "fp8_e4m3" -> kFp8E4M3 (vLLM's names); an Error naming
// --kv-cache-dtype else.
KvCacheDtype parse_kv_cache_dtype(const std::string& name);
const char* kv_cache_dtype_name(KvCacheDtype dtype);
// An Error naming the folder and `model_type` when its family cannot store its KV cache as
// `dtype` (load_model's check, for commands that read a checkpoint without loading it).
void check_kv_cache_dtype(const std::string& dir, const std::string& model_type, KvCacheDtype dtype);

}  // namespace strata
