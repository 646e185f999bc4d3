// Decode steps as CUDA graphs. A decode batch (every sequence brings one token and wants its
// logits) is padded to the smallest bucket that holds it (1, 2, 4, ..., 256 sequences by
// default); the padding sequences are marked on the device (slot -1, pages -1) so they never
// touch a real page or state slot. Per bucket: the first step runs eagerly (it sizes the
// workspace arena and picks cuBLASLt algorithms), the second is captured and launched, later
// ones only upload the batch and replay. Graph replay needs the forward to allocate the same
// workspace in the same order every step, which the ForwardScope arena gives.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
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
  // Runs an eligible batch; returns its logits [n, vocab] (a view of the bucket's logits,
  // valid until that bucket runs again).
  Tensor run(const ForwardBatch& batch, const Forward& forward);
  // Speculative verify steps: forward(batch, logits, hidden) runs the model writing the logits of
  // every row and the final-norm hidden state of every row (Model::forward_with_hidden).
  using ForwardWithHidden = std::function<void(const ForwardBatch& batch, Tensor& logits, Tensor& hidden)>;
  // True when `batch` can run as a verify graph: every sequence brings the same number of tokens
  // Q (1 .. kMaxTokensPerSeq), in order, every row wants its logits, and the padded batch has at
  // most kMaxHiddenRows rows. Mixed lengths (dynamic K, drafts cut short) run eagerly: padding
  // a real sequence with dead tokens would advance its recurrent state.
  bool eligible_with_hidden(const ForwardBatch& batch) const;
  // Runs such a batch as the graph of its (bucket, Q, per-token state slots), padded with
  // Q-token padding sequences;
  // returns the logits [rows, vocab] and sets `hidden` to the hidden states [rows, H], views of
  // that graph's buffers, valid until it runs again (each (bucket, Q) has its own).
  Tensor run_with_hidden(const ForwardBatch& batch, const ForwardWithHidden& forward, Tensor& hidden);
  static constexpr int kMaxTokensPerSeq = 16;
  // Rows of a verify graph: past this a step is bound by its GEMMs, and each row holds a
  // vocabulary's F32 logits (1 MB a row at 248k).
  static constexpr int kMaxHiddenRows = 256;

  // Graphs captured so far (for reports).
  int captured() const;

 private:
  struct Bucket {
    int runs = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
    Tensor logits, hidden;
  };
  // A batch padded to `size` sequences of `tokens` tokens each.
  ForwardBatch padded(const ForwardBatch& batch, int size, int tokens = 1) const;
  // The first step of a graph runs eagerly, the second is captured, later ones replay.
  void launch(Bucket& b, const ForwardBatch& padded_batch, int real_seqs, const std::function<void()>& forward);
  void capture(Bucket& b, const ForwardBatch& batch, const std::function<void()>& forward);
  int bucket_of(int seqs) const { return *std::lower_bound(buckets_.begin(), buckets_.end(), seqs); }

  int64_t vocab_;
  std::vector<int> buckets_;
  std::map<int, Bucket> graphs_;                    // decode steps, by bucket
  // Verify steps, by (bucket, tokens a sequence, ForwardBatch::state_steps' first slot and count:
  // a graph bakes them into its launches).
  std::map<std::tuple<int, int, int, int>, Bucket> verifies_;
};

}  // namespace strata::ops::cuda
