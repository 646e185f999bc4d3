// The CUDA backend's entry points: one per op of ops.h with the same meaning, reached through
// STRATA_CUDA_DISPATCH when the tensors live on the GPU. Activations are BF16 (F32 where ops.h
// says so: GDN gates and state, router logits, logits); weights are BF16 matrices and F32 or
// BF16 vectors. Only compiled and included when strata is built with CUDA (STRATA_WITH_CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/ops/ops.h"
#include "strata/ops/deepseek_v4_ops.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::ops::cuda {

// ---- runtime (runtime.cpp) ----

// True when a CUDA device can be used (the backend then registers its allocator).
bool available();
// Selects the device and registers the Device::kCuda allocator; throws Error without a GPU.
void init();
// Waits for all work queued on the backend's stream; throws Error naming a failed kernel.
void synchronize();
void begin_forward(const ForwardBatch& batch);
void end_forward();

// ---- dense (dense.cu, gemm.cu) ----
void linear(const Tensor& x, const Tensor& w, const Tensor& y);
void linear_split(const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs, const Tensor& w_rest);
void embedding(const Tensor& table, const std::vector<int32_t>& ids, const Tensor& out);
void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, const Tensor& out);
void copy_columns(const Tensor& x, int64_t col0, const Tensor& out);
void split_columns(const Tensor& x, const std::vector<Tensor>& outs);
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void mul_sigmoid(const Tensor& x, const Tensor& gate);
void add_rms_norm_linear(const Tensor& h, const Tensor& y, const Tensor& norm_w, float eps, bool zero_centered,
                         const Tensor& h_out, const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs, const Tensor& w_rest);
void add_sigmoid_gated(const Tensor& y, const Tensor& x, const Tensor& gate);
void silu_mul(const Tensor& gate_up, const Tensor& out);
void quantize_fp8_rows(const Tensor& x, const Tensor& q);  // fp8_rows.cu
// Scaled F4_E2M1 weights (NVFP4 or MXFP4, Tensor::with_scale; rows of a multiple of 16 codes) to
// bf16 element by element: RNE of to_f32()'s values, bit for bit (dequant_fp4.cu). CUDA only: the
// fallback for FP4 weights that no kernel reads compressed.
void dequant_fp4_to_bf16(const Tensor& w, const Tensor& out);
void rms_norm(const Tensor& x, const Tensor& w, float eps, bool zero_centered, const Tensor& out);
void add_rms_norm(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                  const Tensor& out);
// sum = h + y (sum may be h or y) and x = rms_norm(sum), in one pass.
void add_rms_norm_into(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                       const Tensor& sum, const Tensor& x);
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& out);
void qk_norm_rope(const Tensor& qg, const Tensor& k, const Tensor& q_norm, const Tensor& k_norm, float eps,
                  bool zero_centered, const std::vector<int32_t>& positions, const RopeSpec& spec, const Tensor& q,
                  const Tensor& gate);
void rope(const Tensor& x, const std::vector<int32_t>& positions, const RopeSpec& spec);
void fill_random_uniform(const Tensor& t, uint64_t seed, float scale);
void copy_slot(const Tensor& pool, int64_t src, int64_t dst);
void copy_slots(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies);

// ---- attention (attention.cu) ----
void paged_attention(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                     const ForwardBatch& batch, float scale, const Tensor& out);
void paged_attention_gated(const Tensor& q, const Tensor& k, const Tensor& v, const PagedKv& cache,
                           const ForwardBatch& batch, float scale, const Tensor& gate, const Tensor& out);
void paged_kv_write(const Tensor& k, const Tensor& v, const PagedKv& cache, const ForwardBatch& batch);

// ---- Gated DeltaNet (gdn.cu, gdn_chunked.cu) ----
void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& conv_state,
                   const ForwardBatch& batch, const Tensor& out);
void causal_conv1d_split(const Tensor& x, const Tensor& w, const Tensor& conv_state,
                         const ForwardBatch& batch, const std::vector<Tensor>& outs);
void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias,
               const Tensor& g, const Tensor& beta);
void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const Tensor& beta, const Tensor& state, const ForwardBatch& batch,
                      const Tensor& out, GdnAlgorithm algorithm);
void gdn_decode_step(const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                     const Tensor& conv_w, const Tensor& conv_state, const Tensor& a_log,
                     const Tensor& dt_bias, const Tensor& state, const Tensor& norm_w, float eps,
                     const ForwardBatch& batch, const Tensor& out);

// ---- mixture of experts (moe.cu) ----
void moe_route_softmax(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids,
                       const Tensor& weights);
void moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                 const Tensor& weights, const Tensor& out, const ExpertShard& shard = {});
void moe_experts_shared(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                        const Tensor& weights, const Tensor& shared_gate_up, const Tensor& shared_down,
                        const Tensor& shared_gate, const Tensor& out, const ExpertShard& shard = {});
void moe_route_experts(const Tensor& logits, int top_k, bool norm_topk, const Tensor& ids, const Tensor& weights,
                       const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& shared_gate_up,
                       const Tensor& shared_down, const Tensor& shared_gate, const Tensor& out,
                       const ExpertShard& shard = {});

// ---- speculative decoding's draft chain (speculation.cu) ----
void spec_accept_greedy(const Tensor& target, const std::vector<int32_t>& drafts, int32_t k, const Tensor& accepted);
void gather_rows_selected(const Tensor& x, const Tensor& select, int32_t stride, const Tensor& out);
void copy_slots_selected(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies, const Tensor& select,
                         int32_t limit);

// ---- sampling (sampling.cu) ----
void argmax(const Tensor& logits, const Tensor& ids);
void sample_tokens_begin(const Tensor& logits, const SampleBatch& batch, DrawsInFlight& draws);
void sample_tokens_end(DrawsInFlight& draws, SampledTokens& out);
// tokens[rows[i]] = ids[from[i]] for i < n, on the stream (the forward batch's feed).
void feed_tokens(int32_t* tokens, const int32_t* rows, const int32_t* from, int n, const int32_t* ids);
// ctx[s] += shift[s] and positions[q_start[s]] += shift[s] for s < n (the forward batch's shift:
// sequences of one token).
void shift_positions(int32_t* ctx, int32_t* positions, const int32_t* q_start, int n, const int32_t* shift);
// logit_rows[s] = q_start[s] + pick[s] for s < n (the forward batch's pick).
void pick_logit_rows(int32_t* logit_rows, const int32_t* q_start, int n, const int32_t* pick);

// ---- DeepSeek-V4 (deepseek_v4.cu; the ops of deepseek_v4_ops.h that need no cache) ----
void rope_interleaved_tail(const Tensor& x, const std::vector<int32_t>& positions, const TailRope& spec, bool inverse);
void rms_norm_unweighted(const Tensor& x, float eps, const Tensor& out);
void hyper_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale, const HyperSpec& spec,
               const Tensor& collapsed, const Tensor& post, const Tensor& comb);
void hyper_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb, const Tensor& out);
void hyper_head(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale, const HyperSpec& spec,
                const Tensor& out);
void grouped_linear(const Tensor& x, const Tensor& w, int groups, const Tensor& y);
void silu_mul_clamped(const Tensor& gate_up, float limit, const Tensor& out);
void moe_route_sqrt_softplus(const Tensor& logits, const Tensor& bias, int top_k, float scaling, const Tensor& ids,
                             const Tensor& weights);
// tid2eid [V, top_k] I32 on the GPU, its entries checked when the model loaded it.
void moe_route_hash(const Tensor& logits, const Tensor& tid2eid, const std::vector<int32_t>& token_ids, float scaling,
                    const Tensor& ids, const Tensor& weights);
// deepseek_v4_attention.cu: the compressors, compressed pages, indexer and sparse attention.
void compressor_pool(const Tensor& kv, const Tensor& gate, const Tensor& ape, const Tensor& ring_kv,
                     const Tensor& ring_gate, const ForwardBatch& batch, const CompressorSpec& spec,
                     const std::vector<CompressedEntry>& entries, const Tensor& pooled);
void store_compressed(const Tensor& values, const Tensor& pool, const ForwardBatch& batch, int block_size, int ratio,
                      const std::vector<CompressedEntry>& entries);
void indexer_top_k(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                   int block_size, int ratio, float score_scale, float weight_scale, const Tensor& selected);
void indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool, const ForwardBatch& batch,
                    int block_size, int ratio, float score_scale, float weight_scale, const Tensor& scores);
void indexer_select(const Tensor& scores, const ForwardBatch& batch, int ratio, const Tensor& selected);
void sparse_attention(const Tensor& q, const Tensor& kv, const Tensor& kv_pool, const Tensor& comp_pool, int ratio,
                      const Tensor& selected, const Tensor& sinks, const ForwardBatch& batch, int window, float scale,
                      const Tensor& out);
// moe.cu's experts with the clamped SwiGLU.
void moe_experts_clamped(const Tensor& x, const Tensor& gate_up, const Tensor& down, const Tensor& ids,
                         const Tensor& weights, float limit, const Tensor& out, const ExpertShard& shard = {});

// ---- Qwen4-Exp (qwen4_exp.cu, qwen4_exp_qsa.cu; the ops of qwen4_exp_ops.h) ----
void rms_norm_grouped(const Tensor& x, const Tensor& w, int64_t group, float eps, const Tensor& out);
void rms_norm_gated_act(const Tensor& x, const Tensor& z, const Tensor& w, float eps, GateActivation act,
                        const Tensor& out);
void hc_expand(const Tensor& x, int streams, const Tensor& out);
void hc_lowrank_act(const Tensor& x, int streams);
void hc_mix(const Tensor& normed, const Tensor& mix_logits, int streams, const Tensor& out);
void hc_inject_weights(const Tensor& logits, int streams);
void hc_write(const Tensor& residual, const Tensor& block_out, const Tensor& inject);
void ple_gate(const Tensor& key, const Tensor& query, const Tensor& value, int streams, const Tensor& out);
// Token ids come from the batch's device copy; the context pool [slots, ngram_size - 1] I32 and
// ids [T, heads] I64 are GPU tensors.
void ngram_ids(const ForwardBatch& batch, const NgramHashSpec& spec, int64_t vocab, const Tensor& context,
               const Tensor& ids);
// GPU ids and out, host shards: the ids come to the host (a sync), the CPU op gathers the rows,
// which are uploaded into out. Refused during graph capture.
void sharded_embedding(const std::vector<Tensor>& shards, const Tensor& ids, const Tensor& out);
// Throws Error while the backend's stream is being captured (ops::expect_eager_forward).
void expect_eager_forward(const std::string& model);
void qsa_pool_keys(const Tensor& raw_keys, const Tensor& tail, const ForwardBatch& batch, int ratio,
                   const Tensor& pooled);
void qsa_store_block_keys(const Tensor& block_keys, const Tensor& cache, const ForwardBatch& batch, int ratio,
                          int block_size);
void qsa_select(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio, int block_size,
                int top_blocks, float scale, const Tensor& selected);
// Positions of `selected` outside [0, the query's position] are ignored (the CPU op rejects them).
void paged_attention_selected(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                              const Tensor& v_cache, const ForwardBatch& batch, const Tensor& selected, float scale,
                              const Tensor& out);

}  // namespace strata::ops::cuda
