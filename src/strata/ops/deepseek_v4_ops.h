// The DeepSeek-V4 family's ops, in the conventions of ops.h: CPU float32 tensors (row-major
// [T, ...] activations), outputs preallocated by the caller and passed as const Tensor&, every
// check done before the parallel loops.
//
// Cache layout (see models/deepseek_v4_cache.h): the raw sliding-window latents and the
// compressed entries live in paged pools; the compressors' not-yet-closed windows live in
// per-sequence slot rings.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/ops/ops.h"

namespace strata::ops {

// ---- rotary ----

// Interleaved ("GPT-J") RoPE on the trailing rotary_dim channels of each head (the [nope | rope]
// layout): pair i is (x[nope + 2i], x[nope + 2i + 1]), rotated by positions[t] * inv_freq[i].
struct TailRope {
  int rotary_dim = 0;
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_scaling = 1.f;  // multiplies cos and sin
};
// In place on x [T, H, D]; `inverse` rotates by the negative angle (sin -> -sin).
void rope_interleaved_tail(const Tensor& x, const std::vector<int32_t>& positions,
                           const TailRope& spec, bool inverse);

// ---- norms ----

// out = x * rsqrt(mean(x^2) + eps) over the last dimension (no weight).
void rms_norm_unweighted(const Tensor& x, float eps, const Tensor& out);

// ---- manifold-constrained hyper-connections ----

struct HyperSpec {
  int streams = 4;         // hc_mult
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;  // the unweighted RMSNorm over the flattened streams
};
// Projects comb_logits [S, S] (row-major) in place onto (nearly) doubly-stochastic matrices as
// HF/DeepSeek do: softmax over each row + eps, divide each column by (its sum + eps), then
// (iters - 1) times: rows by (sum + eps), columns by (sum + eps).
void sinkhorn_project(float* comb, int streams, int iters, float eps);
// The mHC mapping of one site. x [T, S, D]; fn [(2 + S) * S, S * D]; base [(2 + S) * S];
// scale [3]. With m = fn . (flat(x) * rsqrt(mean(flat(x)^2) + norm_eps)):
//   pre = sigmoid(m[:S] * scale0 + base[:S]) + hc_eps       -> collapsed [T, D] = sum_s pre_s x_s
//   post = 2 sigmoid(m[S:2S] * scale1 + base[S:2S])          -> post [T, S]
//   comb = sinkhorn(m[2S:] * scale2 + base[2S:])             -> comb [T, S, S]
void hyper_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
               const HyperSpec& spec, const Tensor& collapsed, const Tensor& post,
               const Tensor& comb);
// new_x[t, k] = post[t, k] * y[t] + sum_j comb[t, j, k] * x[t, j]. x [T, S, D], y [T, D];
// out [T, S, D] may be x itself.
void hyper_post(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                const Tensor& out);
// The final collapse: fn [S, S * D], base [S], scale [1]; out [T, D] =
// sum_s (sigmoid(m_s * scale + base_s) + hc_eps) x_s.
void hyper_head(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                const HyperSpec& spec, const Tensor& out);

// ---- grouped low-rank output projection ----

// x [T, G * Din], w [G * R, Din]: y[t, g * R + r] = sum_i w[g * R + r, i] * x[t, g * Din + i].
void grouped_linear(const Tensor& x, const Tensor& w, int groups, const Tensor& y);

// ---- KV compressors ----

// One compressor: `ratio` tokens per compressed entry of `head_dim` channels. With `overlap`
// (the ratio-4 compressors) each token projects 2 * head_dim channels [Ca | Cb] and entry w pools
// Ca of window w - 1 with Cb of window w (2 * ratio rows); without, ratio rows of head_dim.
struct CompressorSpec {
  int ratio = 4;
  int head_dim = 0;
  bool overlap = false;
  int width() const { return overlap ? 2 * head_dim : head_dim; }  // channels per token
  int ring_rows() const { return overlap ? 2 * ratio : ratio; }    // tokens kept per sequence
};

// A compressed entry that this step closes: entry `index` of batch.seqs[seq], closed by the
// token at position (index + 1) * ratio - 1.
struct CompressedEntry {
  int32_t seq = 0;
  int32_t index = 0;
};
// Every entry closed by the batch's new tokens, in (sequence, index) order.
std::vector<CompressedEntry> closed_entries(const ForwardBatch& batch, int ratio);

// Softmax-gated pooling of every closed entry. kv, gate [T, width]: the new tokens' projections;
// ape [ratio, width] is added to the gate by slot in window (position % ratio). The ring pools
// ring_kv, ring_gate [slots, ring_rows, width] hold each sequence's last ring_rows tokens (row
// position % ring_rows) and are read for positions before ctx_len, then updated with the new
// tokens. pooled [entries.size(), head_dim]. Per channel: softmax over the window's rows, then
// the weighted sum of kv.
void compressor_pool(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                     const Tensor& ring_kv, const Tensor& ring_gate, const ForwardBatch& batch,
                     const CompressorSpec& spec, const std::vector<CompressedEntry>& entries,
                     const Tensor& pooled);

// The paged layout of compressed entries, one definition for the CPU and CUDA ops. An entry of
// `ratio` tokens lives in the page of its LAST token: within that page at row
// (first token % block_size) / ratio when entries tile a page; alone (row 0) in the page that its
// window ends in when it spans pages. So a page, once full, never changes again: a page shared by
// prefix caching is never written by a second sequence (the first page of a 128-token window
// fills long before the window closes). Entries a page: block_size / ratio, or 1.
int64_t compressed_entries_per_page(int block_size, int ratio);
// The pool row [blocks * entries a page] of entry `entry` of sequence s.
int64_t compressed_entry_row(const SeqInBatch& s, int64_t entry, int block_size, int ratio);
// Checks that block_size and ratio tile and that `pool` is [blocks, entries a page, width] (its
// dtype and device are the calling op's to check); errors name `op` and `what`.
void check_compressed_pool(const Tensor& pool, int block_size, int ratio, int64_t width, const char* op,
                           const char* what);
// Every sequence of the batch has pages, in [0, blocks), for its ctx_len + q_len tokens.
void check_batch_pages(const ForwardBatch& batch, int block_size, int64_t blocks, const char* op);

// Writes values[i] as entry entries[i] into the paged pool [blocks, entries_per_block, head_dim]
// whose entries cover `ratio` tokens, in pages of block_size tokens. Layout (models/model.h's
// rule, with one refinement): an entry lives in the page of its last token, at row
// (e * ratio % block_size) / ratio, or alone (row 0) when it spans pages. Storing a spanning
// entry in its window's last page (not its first) keeps full pages immutable, which prefix
// caching relies on: a shared page is never written again.
void store_compressed(const Tensor& values, const Tensor& pool, const ForwardBatch& batch,
                      int block_size, int ratio, const std::vector<CompressedEntry>& entries);

// ---- lightning indexer ----

// For the token at position p of its sequence, entries e < (p + 1) / ratio are visible. Score of
// entry e: sum_h (relu(q[t, h] . k[e]) * score_scale) * (weights[t, h] * weight_scale).
// selected [T, top_k] I32 gets the
// min(top_k, visible) best entries, highest score first, the lower index winning a tie; the rest
// of the row is -1. q [T, H, d]; weights [T, H]; k_pool [blocks, entries_per_block, d] in pages
// of block_size tokens.
void indexer_top_k(const Tensor& q, const Tensor& weights, const Tensor& k_pool,
                   const ForwardBatch& batch, int block_size, int ratio, float score_scale,
                   float weight_scale, const Tensor& selected);

// indexer_top_k in two steps, for an indexer whose heads are split over tensor-parallel ranks:
// indexer_scores writes row t's scores over q's heads for its visible entries into scores
// [T, indexer_max_visible(batch, ratio)] (0 past them); the ranks' scores summed, indexer_select
// picks each row's top_k as indexer_top_k does (highest first, lower index on a tie, -1 after).
int64_t indexer_max_visible(const ForwardBatch& batch, int ratio);
void indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& k_pool,
                    const ForwardBatch& batch, int block_size, int ratio, float score_scale,
                    float weight_scale, const Tensor& scores);
void indexer_select(const Tensor& scores, const ForwardBatch& batch, int ratio, const Tensor& selected);

// ---- attention ----

// Shared-KV MQA with a sliding window, compressed entries and per-head sinks. kv [T, D] holds the
// new tokens' latents (K = V); they are first written to kv_pool [blocks, block_size, D] at their
// positions. Query t at position p (q [T, H, D]) attends:
//   - the raw latents at positions (p - window, p],
//   - when comp_pool [blocks, entries_per_block, D] is defined: the compressed entries of `ratio`
//     tokens listed in selected [T, K] (-1 skipped), or all visible ones e < (p + 1) / ratio when
//     `selected` is undefined,
// with softmax(q . k * scale) that also counts exp(sinks[h]) in its denominator. out [T, H, D].
void sparse_attention(const Tensor& q, const Tensor& kv, const Tensor& kv_pool,
                      const Tensor& comp_pool, int ratio, const Tensor& selected,
                      const Tensor& sinks, const ForwardBatch& batch, int window, float scale,
                      const Tensor& out);

// ---- mixture of experts ----

// s = sqrt(softplus(logits)); ids = the top_k of s + bias (bias undefined = 0; highest first,
// the lower index winning a tie); weights = s[ids] / (sum + 1e-20) * scaling.
// logits [T, E]; ids [T, top_k] I32; weights [T, top_k].
void moe_route_sqrt_softplus(const Tensor& logits, const Tensor& bias, int top_k, float scaling,
                             const Tensor& ids, const Tensor& weights);
// Hash routing: ids[t] = tid2eid[token_ids[t]] (tid2eid [V, top_k] I32, entries checked against
// the experts), weights from the same s = sqrt(softplus(logits)), normalised and scaled.
void moe_route_hash(const Tensor& logits, const Tensor& tid2eid,
                    const std::vector<int32_t>& token_ids, float scaling, const Tensor& ids,
                    const Tensor& weights);
// out[T, I] = silu(min(gate, limit)) * clamp(up, -limit, limit), (gate; up) = gate_up [T, 2I].
void silu_mul_clamped(const Tensor& gate_up, float limit, const Tensor& out);
// As ops::moe_experts with the clamped SwiGLU: gate_up [E, 2I, H], down [E, H, I]; with a
// shard (expert parallel), e - first indexes them and only the shard's experts contribute.
void moe_experts_clamped(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                         const Tensor& ids, const Tensor& weights, float limit, const Tensor& out,
                         const ExpertShard& shard = {});

}  // namespace strata::ops
