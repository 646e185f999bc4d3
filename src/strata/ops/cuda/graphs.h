// Decode steps as CUDA graphs. A decode batch (every sequence brings one token and wants its
// logits) is padded to the smallest bucket that holds it (1, 2, 4, ..., 256 sequences by
// default); the padding sequences are marked on the device (slot -1, pages -1) so they never
// touch a real page or state slot. Per bucket: the first step runs eagerly (it sizes the
// workspace arena and picks cuBLASLt algorithms), the second is captured and launched, later
// ones only upload the batch and replay. Graph replay needs the forward to allocate the same
// workspace in the same order every step, which the ForwardScope arena gives.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
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
  // Graphs captured so far (for reports).
  int captured() const;

 private:
  struct Bucket {
    int runs = 0;
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;
    Tensor logits;
  };
  ForwardBatch padded(const ForwardBatch& batch, int size) const;
  void capture(Bucket& b, const ForwardBatch& batch, const Forward& forward);

  int64_t vocab_;
  std::vector<int> buckets_;
  std::map<int, Bucket> graphs_;
};

}  // namespace strata::ops::cuda
