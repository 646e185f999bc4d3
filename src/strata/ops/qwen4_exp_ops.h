// The ops that the Qwen4-Exp family adds to the vocabulary of ops.h: grouped RMSNorm, the
// low-rank gated-residual hyper-connections, the per-layer n-gram embeddings (PLE) and the
// Qwen sparse-attention (QSA) block indexer. Same conventions as ops.h: the CPU reference
// computes in float32, outputs are preallocated and passed as const Tensor&, activations are
// row-major [T, ...] over the batch's flattened tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"

namespace strata::ops {

// ---- norms ----

// Zero-centred RMSNorm over groups of `group` consecutive features, with one weight per feature
// of the full row: x [T, C] with C % group == 0, w [C];
// out[t, g*group + i] = x * rsqrt(mean over the group of x^2 + eps) * (1 + w[g*group + i]).
void rms_norm_grouped(const Tensor& x, const Tensor& w, int64_t group, float eps, const Tensor& out);

enum class GateActivation { kSilu, kSigmoid };

// Gated RMSNorm (norm before gate, plain weight) with a choice of gate activation:
// out = rms_norm(x) * w * act(z), over the last dimension.
void rms_norm_gated_act(const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                        GateActivation act, const Tensor& out);

// ---- hyper-connections (S residual streams of width H, stream s at columns [s*H, (s+1)*H)) ----

// out [T, S*H] = S copies of x [T, H].
void hc_expand(const Tensor& x, int streams, const Tensor& out);
// In place: x = silu(x / streams) (the low-rank read-gate activation).
void hc_lowrank_act(const Tensor& x, int streams);
// The read gate's mix: out[t] = (1/S) sum_s sigmoid(mix_logits[t, s]) * normed[t, s];
// normed and mix_logits [T, S*H], out [T, H].
void hc_mix(const Tensor& normed, const Tensor& mix_logits, int streams, const Tensor& out);
// In place on the injection logits [T, S]: w = 2 * sigmoid(w / S).
void hc_inject_weights(const Tensor& logits, int streams);
// The write: residual[t, s] += inject[t, s] * block_out[t]; residual [T, S*H], block_out [T, H],
// inject [T, S].
void hc_write(const Tensor& residual, const Tensor& block_out, const Tensor& inject);

// ---- per-layer n-gram embeddings (PLE) ----

// One PLE layer's hashing constants (models/qwen4_exp_config.h derives them as HF does).
struct NgramHashSpec {
  int ngram_size = 3;       // n-grams of orders 2..ngram_size
  int heads_per_ngram = 1;  // heads per order; head h of order n is column (n - 2) * hpn + h
  int64_t eos = 0;          // the token that starts a new segment
  std::vector<int64_t> multipliers;       // [ngram_size], odd, each < 2^63 / vocab
  std::vector<int64_t> head_vocab_sizes;  // [(ngram_size - 1) * heads_per_ngram], primes
  std::vector<int64_t> head_offsets;      // prefix sums of head_vocab_sizes
  int heads() const { return (ngram_size - 1) * heads_per_ngram; }
};

// Hashed n-gram table rows ids [T, heads] (I64) for the batch's tokens. Each sequence's history
// is its context slot (the last ngram_size - 1 tokens; EOS before the sequence start, i.e. when
// ctx_len == 0) followed by its new tokens. For token t and shift s, the shifted token is
// history[t - s] unless an EOS lies in history[t - s, t - 1] (then EOS): a segment restarts after
// each EOS, and an EOS keeps its own left context. Order n mixes shifts 0..n-1 as
// xor_s(shifted_s * multipliers[s]); head h of order n takes mixed % size[h] + offset[h].
// context pool [slots, ngram_size - 1] I32 is updated to the last ngram_size - 1 history tokens.
// Token ids must lie in [0, vocab) (checked).
void ngram_ids(const ForwardBatch& batch, const NgramHashSpec& spec, int64_t vocab,
               const Tensor& context, const Tensor& ids);

// out [T, heads * dim] (F32): row t is the concatenation over heads h of table row ids[t, h],
// where the table is `shards` ([rows_i, dim] each, F32/BF16/F16 in host memory, e.g. zero-copy
// views of an mmapped checkpoint) stacked along rows in the given order. Only the gathered rows
// are converted. ids [T, heads] I64, each checked against the total row count. On CUDA, ids and
// out (BF16 or F32) live on the GPU while the shards stay in host memory: the ids come to the
// host (a sync), the rows are gathered there and uploaded.
void sharded_embedding(const std::vector<Tensor>& shards, const Tensor& ids, const Tensor& out);

// The PLE gate per stream: g = <key[t, s], query[t, s]> / sqrt(H), g = sign(g) sqrt(max(|g|, 1e-6)),
// out[t, s] = sigmoid(g) * value[t]. key, query, out [T, S*H]; value [T, H].
void ple_gate(const Tensor& key, const Tensor& query, const Tensor& value, int streams,
              const Tensor& out);

// ---- forward ----

// Throws Error while `device` is being captured into a CUDA graph: a Qwen4-Exp forward reads the
// host in its middle (the n-gram table gathers wait for the GPU, the QSA block lists are host-side
// facts of the batch), so a graph of it would replay stale work. A no-op on the CPU.
void expect_eager_forward(Device device, const std::string& model);

// ---- Qwen sparse attention (QSA) ----

// A block of `ratio` tokens completed by this step: sequence index in the batch, block index in
// the sequence (tokens [block * ratio, (block + 1) * ratio)).
struct QsaBlock {
  int32_t seq = 0;
  int32_t block = 0;
};
// The blocks that the batch's new tokens complete, by sequence then block (the row order of the
// pooled keys below).
std::vector<QsaBlock> qsa_completed_blocks(const ForwardBatch& batch, int ratio);

// Host helpers shared by the CPU and CUDA QSA ops. A paged cache of `ratio`-token entries
// [pages, entries_per_page, ...] in pages of block_size tokens (models/model.h): block `block`
// of sequence s lives in row qsa_block_row(...) = page * entries_per_page + entry.
void qsa_check_paged_geometry(const Tensor& cache, int ratio, int block_size, const char* op);
// Checks that s's block table covers its ctx_len + q_len tokens with pages in [0, num_pages).
void qsa_check_seq_pages(const SeqInBatch& s, int64_t page_size, int64_t num_pages, const char* op);
int64_t qsa_block_row(const SeqInBatch& s, int64_t block, int ratio, int block_size,
                      int64_t entries_per_page);

// Mean of the raw indexer keys of each completed block, in qsa_completed_blocks order:
// raw_keys [T, d] are the new tokens' keys; the keys of a block's earlier tokens come from the
// sequence's tail slot, tail pool [slots, max(1, ratio - 1), d], which is then updated to hold the
// keys of the sequence's trailing incomplete block. pooled [N, d].
void qsa_pool_keys(const Tensor& raw_keys, const Tensor& tail, const ForwardBatch& batch, int ratio,
                   const Tensor& pooled);

// Writes the finished block keys [N, d] (qsa_completed_blocks order) into the paged block-key
// cache [num_blocks, entries_per_page, d] (PagedCacheSpec with tokens_per_entry = ratio, pages of
// block_size tokens; layout rule in models/model.h).
void qsa_store_block_keys(const Tensor& block_keys, const Tensor& cache, const ForwardBatch& batch,
                          int ratio, int block_size);

// The QSA token selection. For the query at position p (= ctx_len + i) the complete blocks are
// b < (p + 1) / ratio, scored score_b = sum_h relu(q[t, h] . K_b) * scale from the block-key cache;
// the min(top_blocks, n) best blocks (the lower index wins a tie) give their tokens, and the tail
// tokens [n * ratio, p] are always kept. The query's own block competes like any other: when p
// ends a block that loses, the query sees neither itself nor that block. q [T, Hi, d];
// selected [T, top_blocks * ratio + ratio - 1] I32 receives the positions in ascending order,
// padded with -1.
void qsa_select(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio,
                int block_size, int top_blocks, float scale, const Tensor& selected);

// qsa_select in two steps (CPU), for an indexer whose query heads are split over tensor-parallel
// ranks: qsa_block_scores writes row t's scores over q's heads for its complete blocks into
// scores [T, qsa_max_blocks(batch, ratio)] (0 past them); the ranks' scores summed,
// qsa_select_scored selects from them as qsa_select does.
int64_t qsa_max_blocks(const ForwardBatch& batch, int ratio);
void qsa_block_scores(const Tensor& q, const Tensor& block_cache, const ForwardBatch& batch, int ratio,
                      int block_size, float scale, const Tensor& scores);
void qsa_select_scored(const Tensor& scores, const ForwardBatch& batch, int ratio, int top_blocks,
                       const Tensor& selected);

// As ops::paged_attention (writes the new k, v into the paged caches, then GQA attention), but
// each query attends only to the positions listed in its row of `selected` (-1 entries ignored).
void paged_attention_selected(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& k_cache, const Tensor& v_cache,
                              const ForwardBatch& batch, const Tensor& selected, float scale,
                              const Tensor& out);

}  // namespace strata::ops
