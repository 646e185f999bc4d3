// The op vocabulary. Every model forward is written over these functions; each dispatches on
// the device of its tensors to the CPU reference (ops/cpu, fp32 math) or to CUDA (ops/cuda).
//
// Tensors are handles: outputs are passed as const Tensor& and written through.
// Conventions: activations are row-major [T, ...] with T the batch's flattened tokens. Outputs
// are preallocated by the caller with the documented shape. On the CPU every activation is F32.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"

namespace strata::ops {

// ---- dense ----

// y[T, N] = x[T, K] · w[N, K]^T
void linear(const Tensor& x, const Tensor& w, const Tensor& y);
// out[i, :] = table[ids[i], :]; ids are checked against the table's rows.
void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out);
// out[i, :] = x[rows[i], :]
void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, const Tensor& out);
// out[T, n] = x[T, col0 : col0 + n] (x viewed as [T, C])
void copy_columns(const Tensor& x, int64_t col0, const Tensor& out);
// out = a + b (same shapes)
void add(const Tensor& a, const Tensor& b, const Tensor& out);
// x *= sigmoid(gate): elementwise when the sizes match, or one gate per row of x when gate
// has one element per row.
void mul_sigmoid(const Tensor& x, const Tensor& gate);
// out[T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]
void silu_mul(const Tensor& gate_up, const Tensor& out);
// FP8 activations, per row and per 128 columns (the rows of A of the W8A8 expert GEMMs on CUDA):
// q [R, C] F8_E4M3 with F32 scales [R, ceil(C / 128)] (Tensor::with_scale, group 128). A group's
// scale is s = max(amax, 1e-10) / 448 (amax ignores NaN), its codes e4m3(x / s) by IEEE division,
// to nearest even, saturating at 448, a NaN quotient as code 0x7f. x F32 on the CPU, BF16 on
// CUDA; equal codes and scales for equal values.
void quantize_fp8_rows(const Tensor& x, const Tensor& q);

// ---- norms ----

// Over the last dimension: out = x * rsqrt(mean(x^2) + eps) * (zero_centered ? 1 + w : w).
void rms_norm(const Tensor& x, const Tensor& w, float eps, bool zero_centered, const Tensor& out);
// Gated RMSNorm (norm before gate): out = rms_norm(x) * w * silu(z), over the last dimension.
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& out);

// ---- rotary ----

struct RopeSpec {
  int rotary_dim = 0;            // leading dims of each head that rotate (partial rotary)
  std::vector<float> inv_freq;   // [rotary_dim / 2]
  float attention_scaling = 1.f; // multiplies cos and sin
  // Interleaved mRoPE sections (T, H, W). With text positions all three position rows are
  // equal and mRoPE reduces to plain RoPE; the layout is kept for multimodal positions.
  std::vector<int> mrope_section;
};
// In place on x [T, H, D]: NeoX (rotate-half) rotation of x[..., :rotary_dim] at positions[t].
void rope(const Tensor& x, const std::vector<int32_t>& positions, const RopeSpec& spec);

// Gated attention's query/key preparation in one op: qg [T, Hq, 2D] holds per head [query |
// gate]; q [T, Hq, D] = rope(rms_norm(query) * w_q), gate [T, Hq * D] = the gate halves, and k
// [T, Hkv, D] = rope(rms_norm(k) * w_k) in place (zero_centered: 1 + w). The same result as
// split_columns, rms_norm twice and rope twice.
void qk_norm_rope(const Tensor& qg, const Tensor& k, const Tensor& q_norm, const Tensor& k_norm,
                  float eps, bool zero_centered, const std::vector<int32_t>& positions,
                  const RopeSpec& spec, const Tensor& q, const Tensor& gate);

// ---- attention ----

// One attention layer's paged KV cache: k and v [num_blocks, block_size, Hkv, D] in the
// activations' dtype; or, with --kv-cache-dtype fp8, k and v F8E4M3 and k_scale and v_scale
// [num_blocks, block_size, Hkv] UE8M0, one power-of-two scale a (token, kv head) vector
// (ops/kv_fp8.h).
struct PagedKv {
  Tensor k, v, k_scale, v_scale;
  bool fp8() const { return k.dtype() == DType::kF8E4M3; }
};

// Writes the new k, v [T, Hkv, D] into the paged cache at each token's position, then computes
// causal GQA attention of q [T, Hq, D] over the sequence's ctx_len + i + 1 visible tokens, as
// the cache holds them (an FP8 cache: its tokens' keys and values as encoded, the new ones too).
// out is [T, Hq, D].
void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                     const ForwardBatch& batch, float scale, const Tensor& out);
// paged_attention's first part alone: the new k, v [T, Hkv, D] written into the paged cache at
// each token's position (for a layer whose KV must be complete but whose output is not needed:
// the draft head's catch-ups, Model::mtp_write_kv).
void paged_kv_write(const Tensor& k, const Tensor& v, const PagedKv& cache, const ForwardBatch& batch);
// paged_attention, then out *= sigmoid(gate) elementwise (gate has out's elements): the gated
// attention output of the Qwen3.5 family in one op, so that a CUDA decode step applies the gate
// where it writes the output.
void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                           const ForwardBatch& batch, float scale, const Tensor& gate, const Tensor& out);

// ---- linear attention (Gated DeltaNet) ----

// Causal depthwise conv1d with SiLU over each sequence, continuing from the sequence's conv
// state (zeros when ctx_len == 0). x [T, C], w [C, K], conv_state pool [slots, K - 1, C]
// (updated to the last K - 1 inputs). out [T, C].
void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& conv_state,
                   const ForwardBatch& batch, const Tensor& out);
// causal_conv1d with its output split by columns into outs (as split_columns), one op: on
// CUDA the conv writes each output itself (Gated DeltaNet's q, k and v).
void causal_conv1d_split(const Tensor& x, const Tensor& w, const Tensor& conv_state,
                         const ForwardBatch& batch, const std::vector<Tensor>& outs);

// The GDN gates from the projections a, b [T, Hv]: g = -exp(A_log) * softplus(a + dt_bias)
// (the log decay) and beta = sigmoid(b).
void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias,
               const Tensor& g, const Tensor& beta);

enum class GdnAlgorithm {
  // Chunks of 64 condensed by a UT solve (HF's torch_chunk_gated_delta_rule): fast for long
  // spans. Its rounding depends on where spans start, so results vary with prefill chunking.
  kChunked,
  // Token by token: each token's result is independent of how the sequence was split into
  // steps (the CPU path's batch and chunk invariance rests on this).
  kRecurrent,
};

// The gated delta rule per sequence, from the slot's state (zeros when ctx_len == 0):
// q, k [T, Hk, Dk] are l2-normalised inside (eps 1e-6) and q is scaled by Dk^-1/2;
// value head h reads key head h / (Hv / Hk). g [T, Hv] is the log decay, beta [T, Hv].
// state pool [slots, Hv, Dk, Dv] is updated; out [T, Hv, Dv].
// kChunked applies to spans of more than one token; single tokens always use the recurrence.
// The state pool is F32 or BF16. A BF16 state is loaded to fp32 and computed on in fp32 as an
// F32 one, and rounded to nearest even where the algorithm completes a state: the recurrence
// after every token (each output from the unrounded state; so a span equals its tokens run one
// step each, and the CPU's split invariance holds), kChunked once at the span's end (its chunk
// states stay fp32).
void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& beta, const Tensor& state, const ForwardBatch& batch,
                      const Tensor& out, GdnAlgorithm algorithm = GdnAlgorithm::kChunked);

// ---- mixture of experts ----

// Softmax routing: probs = softmax(logits [T, E]); the top_k experts per row (the lower index
// wins a tie), weights renormalised to sum 1 when norm_topk. ids [T, top_k] I32, weights
// [T, top_k] F32.
void moe_route_softmax(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids,
                       const Tensor& weights);
// Expert parallelism: gate_up and down hold experts [first, first + E_local) of `total` (0: all
// of them, first 0); the other experts' terms are left out here (their ranks add them).
struct ExpertShard {
  int64_t first = 0, total = 0;
};
// out[T, H] = sum_j weights[t, j] * down[e] · (silu(gate) * up), (gate; up) = gate_up[e] · x[t],
// with e = ids[t, j]; gate_up [E, 2I, H], down [E, H, I]. With a shard, e - first indexes them
// and only the shard's experts contribute.
void moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const Tensor& out, const ExpertShard& shard = {});
// moe_experts, then the shared expert added under its sigmoid gate: out += sigmoid(shared_gate)
// * shared_down · silu_mul(shared_gate_up); shared_gate_up [T, 2 Is] (its gate and up
// projections, already computed), shared_down [H, Is], shared_gate [T, 1]. The same result as
// moe_experts, silu_mul, linear and add_sigmoid_gated one after the other (one pass over the
// experts and the shared expert at decode on CUDA).
void moe_experts_shared(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                        const Tensor& weights, const Tensor& shared_gate_up, const Tensor& shared_down,
                        const Tensor& shared_gate, const Tensor& out, const ExpertShard& shard = {});
// moe_route_softmax(logits, top_k, norm_topk, ids, weights), then moe_experts_shared when
// shared_down is defined, else moe_experts (the shared_* tensors then undefined). One op so that
// a CUDA decode step routes inside the experts' gate/up pass: one kernel less per layer.
void moe_route_experts(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights,
                       const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& shared_gate_up,
                       const Tensor& shared_down, const Tensor& shared_gate, const Tensor& out,
                       const ExpertShard& shard = {});

// ---- cache management ----

// pool[dst] = pool[src] along dimension 0 (one recurrent-state slot or one cache page), any
// dtype: the engine's state snapshots and copy-on-fork of a partly filled page.
void copy_slot(const Tensor& pool, int64_t src, int64_t dst);
// copy_slot for every pool and every (src, dst) pair at once (one launch on CUDA, where slot
// copies one at a time cost a few microseconds each). The pairs must be independent: no slot
// written by one pair is read or written by another. The pools share a device.
struct SlotCopy {
  int32_t src = 0, dst = 0;
};
void copy_slots(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies);

// ---- speculative decoding's draft chain on the model's device (engine/engine_spec_chain.cpp) ----

// Greedy acceptance: accepted[i] = the number of leading j < k with target[i * (k + 1) + j] ==
// drafts[i * k + j], for the n = accepted.numel() sequences of a verify (target [n * (k + 1)] I32,
// the target's picks; accepted [n] I32 on the same device; drafts on the host).
void spec_accept_greedy(const Tensor& target, const std::vector<int32_t>& drafts, int32_t k, const Tensor& accepted);
// out[i] = x[i * stride + select[i]]: one row of each group of `stride` rows of x [n * stride, ...]
// (any dtype) into out [n, ...]; select [n] I32 on x's device, each in [0, stride).
void gather_rows_selected(const Tensor& x, const Tensor& select, int32_t stride, const Tensor& out);
// For every pool and copy i: pool[copies[i].dst] = pool[copies[i].src + select[i]] when select[i] <
// limit, else nothing (the rollback to the state a verify stored after its last accepted token);
// select [copies.size()] I32 on the pools' device, each in [0, limit].
void copy_slots_selected(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies, const Tensor& select,
                         int32_t limit);

// ---- forward scope, fused ops, sampling (added with the CUDA backend) ----

// Brackets one model forward. On CUDA it uploads the batch's index arrays (token ids,
// positions, per-sequence rows, lengths, slots, block tables, logit rows) to the device once,
// and serves the tensors allocated on this thread while it is open from a workspace arena that
// is reset per forward, so that intermediate addresses repeat from step to step (CUDA graph
// replay needs this). Tensors allocated inside the scope must not outlive it (allocate results
// such as the logits before opening it). A no-op on the CPU.
class ForwardScope {
 public:
  ForwardScope(Device device, const ForwardBatch& batch);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;

 private:
  Device device_;
};

// The residual add fused into the following norm: h += y, then out = rms_norm(h) (as rms_norm).
// On the device h keeps the activation dtype, and the norm reads the rounded sum.
void add_rms_norm(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                  const Tensor& out);
// Splits x [T, C] by columns: outs[i] [T, n_i] takes columns [sum_{j<i} n_j, + n_i); the n_i
// must sum to C.
void split_columns(const Tensor& x, const std::vector<Tensor>& outs);
// linear(x, w) split by columns into outs as split_columns: w's rows are the outputs'
// columns, concatenated (several projections of one input in one pass over x). The outputs
// may differ in dtype on the device (e.g. F32 router logits beside BF16 activations).
// w_rest: rows after w's (another dtype: an FP8 projection's rows that its checkpoint left bf16;
// CUDA only), the outputs' columns after w's.
void linear_split(const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs, const Tensor& w_rest = Tensor());
// The pre-norm residual step fused with the projection after it: h_out = h + y (rounded as
// add_rms_norm rounds h), x = rms_norm(h_out) * w (zero_centered: 1 + w), outs = the columns of
// x · weight^T as in linear_split. Without y (undefined): x = rms_norm(h) and h_out is unused.
// h_out must not alias h or y on CUDA's fused path (other blocks still read them); elsewhere
// it may. The same result as add (or nothing), rms_norm and linear_split one after the other.
void add_rms_norm_linear(const Tensor& h, const Tensor& y, const Tensor& norm_w, float eps,
                         bool zero_centered, const Tensor& h_out, const Tensor& x,
                         const Tensor& weight, const std::vector<Tensor>& outs, const Tensor& weight_rest = Tensor());
// y += x * sigmoid(gate), one gate per row of x (gate has one element per row).
void add_sigmoid_gated(const Tensor& y, const Tensor& x, const Tensor& gate);

// The most tokens a sequence may bring to gdn_decode_step (speculative verify steps bring a few).
constexpr int kGdnStepMaxTokens = 16;

// One Gated DeltaNet token-mixer step for batches whose sequences have 1..kGdnStepMaxTokens new
// tokens each (q_len may differ between sequences), fused: causal_conv1d of qkv
// [T, 2*Hk*Dk + Hv*Dv] with the conv state, the split into q, k, v, gdn_gates(a, b [T, Hv],
// a_log, dt_bias), the recurrent gated delta rule on the state pool [slots, Hv, Dk, Dv] (F32 or
// BF16, as gated_delta_rule), and rms_norm_gated with z [T, Hv, Dv] and norm_w [Dv]; out
// [T, Hv, Dv]. A sequence's tokens run one by one, in order; the conv state and the recurrent
// state hold the state after its last token. The same result as those ops one after the other.
// With batch.state_steps (speculative rollback), the recurrent and conv states after each token
// j of a sequence in slot s, j < min(q_len - 1, count), also go to slot first + s * count + j.
void gdn_decode_step(const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                     const Tensor& conv_w, const Tensor& conv_state, const Tensor& a_log,
                     const Tensor& dt_bias, const Tensor& state, const Tensor& norm_w, float eps,
                     const ForwardBatch& batch, const Tensor& out);

// Fills t (F32, BF16 or F8_E4M3) with uniform values in [-scale, scale) from a counter-based hash
// of (seed, element index): the same values on every device (BF16 and F8_E4M3 round the same
// float, to nearest even, F8 saturating at +-448). The --load-format dummy weights.
void fill_random_uniform(const Tensor& t, uint64_t seed, float scale);

// ids[r] = the index of the largest logits[r, :] (the lower index wins a tie); logits [N, V]
// F32, ids [N] I32.
void argmax(const Tensor& logits, const Tensor& ids);

// ---- the engine's sampling, on the logits' device (engine/sampler.h's definition) ----

constexpr int kMaxTopLogprobs = 20;

// One token's change to its row's logits, applied in this order: x += bias; x = -inf if mask;
// x = x > 0 ? x / repetition_penalty : x * repetition_penalty if repeat; x -= subtract.
struct LogitAdjust {
  int32_t id = 0;
  float bias = 0.f;      // logit_bias
  uint8_t mask = 0;      // min_tokens: eos and stop ids
  uint8_t repeat = 0;    // in the prompt or the output (repetition penalty)
  float subtract = 0.f;  // frequency * output count + presence
};

// One draw. The processed logits x are the logits row after its adjustments. Greedy: the arg
// max of x, the lowest id winning a tie. Else z = x * inv_temperature and e = exp(z - max z);
// the kept set is the tokens with e >= min_p, z >= the top_k-th largest z (ties at the cut
// kept; top_k 0: off) and, when top_p < 1, p >= tau with tau the largest kept value whose kept
// tokens with p >= tau hold at least top_p of the kept mass; the draw is the first kept token,
// in id order, at which the running kept mass exceeds uniform * (kept mass).
struct SampleSpec {
  int32_t logits_row = 0;  // several draws may read one row (n > 1 completions)
  bool greedy = true;
  float inv_temperature = 1.f;
  int32_t top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  float repetition_penalty = 1.f;
  float uniform = 0.f;            // in [0, 1)
  int32_t num_top_logprobs = -1;  // -1: no log-probabilities; else [0, kMaxTopLogprobs]
  int32_t adjust_begin = 0, adjust_count = 0;  // its entries of SampleBatch::adjust, ids unique
  // >= 0: a structured-output mask, SampleBatch::allow[allow_row * allow_words ...]: a token
  // whose bit is clear gets -inf after the adjustments (on every device), so it is never drawn
  // and its processed log-probability is -inf.
  int32_t allow_row = -1;
};

struct SampleBatch {
  std::vector<SampleSpec> rows;
  std::vector<LogitAdjust> adjust;
  std::vector<uint64_t> allow;  // the rows' allowed-token bitmasks, allow_words words each
  int64_t allow_words = 0;      // (V + 63) / 64 when any row has a mask
  // Log-probabilities of the raw logits instead of the processed ones (log_softmax(x), or of z
  // when not greedy).
  bool raw_logprobs = false;
};

// What comes back to the host: per draw its token, and when asked its log-probability and the
// top ones (most likely first, the lower id first on a tie) at top[r * kMaxTopLogprobs + j].
struct SampledTokens {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  void resize(size_t n) {
    ids.assign(n, 0);
    logprobs.assign(n, 0.f);
    top_ids.assign(n * kMaxTopLogprobs, 0);
    top_logprobs.assign(n * kMaxTopLogprobs, 0.f);
  }
};

// The draws of `batch` from logits [R, V] F32 (left unchanged). NaN logits are outside the
// contract (the arg max skips them on both devices; a draw's result may differ). On CUDA only the results
// above are copied back (through pinned memory); the CPU computes in double.
void sample_tokens(const Tensor& logits, const SampleBatch& batch, SampledTokens& out);

// sample_tokens in two halves, for a host that reads a step's draws one step later (the
// engine's overlapped scheduling). sample_tokens_begin queues the draws and the copy of their
// results to the host, and returns; sample_tokens_end waits for that copy and fills `out`. Draw
// r's id also stays at draws.ids[r] on the logits' device until the next begin on `draws`,
// where the next forward batch's feed reads it (core/batch.h). On the CPU, begin computes the
// draws. One DrawsInFlight holds one step's draws; a begin needs the previous one's end.
struct DrawsInFlight {
  Tensor ids;                     // I32 on the logits' device; [0, rows) hold the draws' ids
  int64_t rows = 0;
  bool pending = false;           // begun, not ended
  SampledTokens cpu;              // the CPU's results, until end
  std::shared_ptr<void> staging;  // CUDA: the pinned buffers and the event, kept for reuse
};
void sample_tokens_begin(const Tensor& logits, const SampleBatch& batch, DrawsInFlight& draws);
void sample_tokens_end(DrawsInFlight& draws, SampledTokens& out);
// The checks of sample_tokens (rows, ranges and ids within logits' shape), naming the field.
void check_sample_batch(const Tensor& logits, const SampleBatch& batch);

// The CPU definition of one draw from processed logits x [V] (already adjusted): the token and,
// when spec.num_top_logprobs >= 0 and !raw, its log-probability and the top ones. Shared with
// the engine's reference Sampler.
struct RowDraw {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;
};
void sample_processed_row(std::vector<float>& x, const SampleSpec& spec, bool raw, RowDraw& out);
// The distribution a non-greedy draw of sample_processed_row samples from: x becomes z = x *
// inv_temperature and probs the kept set's weights normalised to sum 1 (the arg max alone when
// nothing is kept). Speculative decoding's acceptance reads it for the target and the draft.
void kept_distribution(std::vector<float>& x, const SampleSpec& spec, std::vector<double>& probs);
// log_softmax of x into out (double sums, float results), and its top n entries.
void log_softmax_row(const std::vector<float>& x, std::vector<float>& out);
void top_entries(const std::vector<float>& lp, int n, std::vector<std::pair<int32_t, float>>& out);

}  // namespace strata::ops
