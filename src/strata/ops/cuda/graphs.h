// Decode steps as CUDA graphs. A decode batch (every sequence brings one token and wants its
// logits) is padded to the smallest bucket that holds it (1, 2, 4, ..., 256 sequences by
// default); the padding sequences are marked on the device (slot -1, pages -1) so they never
// touch a real page or state slot. Per bucket: the first step runs eagerly (it sizes the
// workspace arena and picks cuBLASLt algorithms), the second is captured and launched, later
// ones only upload the batch and replay. Graph replay needs the forward to allocate the same
// workspace in the same order every step, which the ForwardScope arena gives. Every graph writes
// its logits into one buffer of the most rows a graph holds, allocated with the DecodeGraphs
// (so that the engine's memory plan, made after, counts it): graphs run one after another on the
// stream, and each step's logits are consumed (sampled, read back) in stream order before the
// next forward is queued.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"

namespace strata::ops::cuda {

class DecodeGraphs {
 public:
  // forward(batch, logits) runs the model on `batch`, writing logits [rows, vocab] F32 into
  // `logits` (reusing it when its shape fits, as Model::forward does).
  using Forward = std::function<void(const ForwardBatch& batch, Tensor& logits)>;

  explicit DecodeGraphs(int64_t vocab, std::vector<int> buckets = {1, 2, 4, 8, 16, 32, 64, 128, 256});
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // True when `batch` can run as a graph: one new token and one logits row per sequence, rows
  // in order, and no more sequences than the largest bucket.
  bool eligible(const ForwardBatch& batch) const;
  // Runs an eligible batch; returns its logits [n, vocab] (a view of the shared logits buffer,
  // valid until a graph runs again).
  Tensor run(const ForwardBatch& batch, const Forward& forward);
  // Speculative verify steps: forward(batch, logits, hidden) runs the model writing the logits of
  // every row and the final-norm hidden state of every row (Model::forward_with_hidden).
  using ForwardWithHidden = std::function<void(const ForwardBatch& batch, Tensor& logits, Tensor& hidden)>;
  // True when `batch` can run as a verify graph: every sequence brings the same number of tokens
  // Q (1 .. kMaxTokensPerSeq), in order, every row wants its logits, and the padded batch has at
  // most kMaxHiddenRows rows; its tokens may be fed (ForwardBatch::feed_ids, as a decode step's).
  // Mixed lengths (dynamic K, drafts cut short) run eagerly: padding
  // a real sequence with dead tokens would advance its recurrent state.
  bool eligible_with_hidden(const ForwardBatch& batch) const;
  // Runs such a batch as the graph of its (bucket, Q, per-token state slots), padded with
  // Q-token padding sequences;
  // returns the logits [rows, vocab] (a view of the shared logits buffer, valid until a graph
  // runs again) and sets `hidden` to the hidden states [rows, H], a view of that graph's own
  // buffer, valid until it runs again (each (bucket, Q) has its own).
  Tensor run_with_hidden(const ForwardBatch& batch, const ForwardWithHidden& forward, Tensor& hidden);
  // Draft-head steps (the MTP head): forward(batch, input, logits, hidden) runs the head on the
  // hidden states `input` [rows, H], writing the logits of the batch's logit rows and the head's
  // own hidden state of every row (Model::mtp_forward_with_hidden).
  using HeadForward =
      std::function<void(const ForwardBatch& batch, const Tensor& input, Tensor& logits, Tensor& hidden)>;
  // True when `batch` can run as a head graph: every sequence brings the same number of tokens Q
  // (1 .. kMaxTokensPerSeq), in order, and wants the logits of its last one or (Q > 1) of every
  // one; the padded batch has at most kMaxHiddenRows rows. Its tokens may be fed and (Q = 1)
  // its positions shifted on the device (ForwardBatch::feed_ids, shift).
  bool eligible_head(const ForwardBatch& batch) const;
  // Runs such a batch as the head graph of its (bucket, Q, every row or the last): `input` [rows,
  // H] is copied into the graph's input buffer first (the padding rows' inputs are zeros).
  // Returns the logits [seqs or rows, vocab] (shared buffer) and sets `hidden` [rows, H] (the
  // graph's own), as run_with_hidden.
  Tensor run_head(const ForwardBatch& batch, const Tensor& input, const HeadForward& forward, Tensor& hidden);
  static constexpr int kMaxTokensPerSeq = 16;
  // Rows of a verify graph: past this a step is bound by its GEMMs, and each row holds a
  // vocabulary's F32 logits (1 MB a row at 248k).
  static constexpr int kMaxHiddenRows = 256;

  // Start-up capture, as vLLM's: the graphs of every bucket up to the one that holds `max_seqs`
  // sequences, run eagerly once and captured on batches of padding sequences only (which touch
  // no cache page or state slot), so that no request pays a capture. warm_decode: decode steps;
  // warm_verify: verify steps of `q` tokens a sequence with the per-token state slots
  // `state_steps` (buckets of at most kMaxHiddenRows rows; returns the hidden states of the
  // last, zeros, for warm_head's input); warm_head: head steps of `q` tokens a sequence wanting
  // every row's logits (all_rows, q > 1) or the last's, on inputs like `input` (zeros).
  void warm_decode(int max_seqs, const Forward& forward);
  Tensor warm_verify(int max_seqs, int q, ForwardBatch::StateSteps state_steps, const ForwardWithHidden& forward);
  void warm_head(int max_seqs, int q, bool all_rows, const Tensor& input, const HeadForward& forward);
  // Graphs captured so far (for reports).
  int captured() const;
  // Bytes of the shared logits buffer.
  size_t logits_bytes() const { return logits_.nbytes(); }

 private:
  struct Bucket {
    int runs = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
    Tensor hidden, input;
  };
  // Q when every sequence of `batch` brings Q tokens (1 .. kMaxTokensPerSeq), in order, and the
  // padded batch has at most kMaxHiddenRows rows; else 0.
  int uniform_tokens(const ForwardBatch& batch) const;
  // Whether a batch of sequences of q tokens each wants every row's logits, in order.
  static bool every_row(const ForwardBatch& batch, int q);
  // A batch padded to `size` sequences of `tokens` tokens each; the padding sequences want the
  // logits of every row (every_row) or of their last.
  ForwardBatch padded(const ForwardBatch& batch, int size, int tokens = 1, bool every_row = true) const;
  // The first step of a graph runs eagerly, the second is captured, later ones replay.
  void launch(Bucket& b, const ForwardBatch& padded_batch, int real_seqs, const std::function<void()>& forward);
  void capture(Bucket& b, const ForwardBatch& batch, const std::function<void()>& forward);
  int bucket_of(int seqs) const { return *std::lower_bound(buckets_.begin(), buckets_.end(), seqs); }
  // The bucket that holds max_seqs sequences (the largest past it): the warm_* captures' last.
  int last_bucket(int max_seqs) const;
  // A head graph's input buffer of `rows` rows shaped like `like` (zeros: the padding rows'
  // inputs), made on the bucket's first run.
  static void make_head_input(Bucket& b, int64_t rows, const Tensor& like);

  int64_t vocab_;
  std::vector<int> buckets_;
  Tensor logits_;  // [max(largest bucket, kMaxHiddenRows), vocab] F32, every graph's logits
  std::map<int, Bucket> graphs_;                    // decode steps, by bucket
  // Verify steps, by (bucket, tokens a sequence, ForwardBatch::state_steps' first slot and count:
  // a graph bakes them into its launches).
  std::map<std::tuple<int, int, int, int>, Bucket> verifies_;
  // Draft-head steps, by (bucket, tokens a sequence, every row's logits or the last's).
  std::map<std::tuple<int, int, bool>, Bucket> heads_;
};

}  // namespace strata::ops::cuda
