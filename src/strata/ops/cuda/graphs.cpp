#include "strata/ops/cuda/graphs.h"

#include <algorithm>
#include <climits>

#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

// Marks sequences from `first` on as padding for the uploads made while it lives.
class PaddingScope {
 public:
  explicit PaddingScope(int first) { set_padding_from(first); }
  ~PaddingScope() { set_padding_from(INT_MAX); }
};

}  // namespace

DecodeGraphs::DecodeGraphs(int64_t vocab, std::vector<int> buckets) : vocab_(vocab), buckets_(std::move(buckets)) {
  std::sort(buckets_.begin(), buckets_.end());
  STRATA_CHECK(!buckets_.empty() && buckets_[0] > 0, "DecodeGraphs: bucket sizes must be positive");
  logits_ = persistent({std::max(buckets_.back(), kMaxHiddenRows), vocab_}, DType::kF32);
}

DecodeGraphs::~DecodeGraphs() {
  for (auto& [size, b] : graphs_) {
    if (b.exec) (void)cudaGraphExecDestroy(b.exec);
  }
  for (auto& [key, b] : verifies_) {
    if (b.exec) (void)cudaGraphExecDestroy(b.exec);
  }
  for (auto& [key, b] : heads_) {
    if (b.exec) (void)cudaGraphExecDestroy(b.exec);
  }
}

bool DecodeGraphs::eligible(const ForwardBatch& batch) const {
  const size_t n = batch.seqs.size();
  if (n == 0 || int(n) > buckets_.back() || batch.logit_rows.size() != n || batch.token_ids.size() != n) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (batch.seqs[i].q_len != 1 || batch.logit_rows[i] != int32_t(i)) return false;
  }
  return true;
}

int DecodeGraphs::uniform_tokens(const ForwardBatch& batch) const {
  const size_t n = batch.seqs.size();
  if (n == 0 || int(n) > buckets_.back()) return 0;
  const int q = batch.seqs[0].q_len;
  if (q < 1 || q > kMaxTokensPerSeq || bucket_of(int(n)) * q > kMaxHiddenRows) return 0;
  if (batch.token_ids.size() != n * size_t(q)) return 0;
  for (size_t i = 0; i < n; ++i) {
    if (batch.seqs[i].q_len != q || batch.seqs[i].q_start != int32_t(i) * q) return 0;
  }
  return q;
}

bool DecodeGraphs::eligible_with_hidden(const ForwardBatch& batch) const {
  const int q = uniform_tokens(batch);
  return q > 0 && !batch.shift.defined() && every_row(batch, q);
}

bool DecodeGraphs::every_row(const ForwardBatch& batch, int q) {
  const size_t rows = batch.seqs.size() * size_t(q);
  if (batch.logit_rows.size() != rows) return false;
  for (size_t r = 0; r < rows; ++r) {
    if (batch.logit_rows[r] != int32_t(r)) return false;
  }
  return true;
}

bool DecodeGraphs::eligible_head(const ForwardBatch& batch) const {
  const int q = uniform_tokens(batch);
  const size_t n = batch.seqs.size();
  if (q == 0) return false;
  if (q > 1 && every_row(batch, q)) return true;
  if (batch.logit_rows.size() != n) return false;
  for (size_t i = 0; i < n; ++i) {
    if (batch.logit_rows[i] != int32_t(i) * q + q - 1) return false;
  }
  return true;
}

int DecodeGraphs::captured() const {
  int c = 0;
  for (const auto& [size, b] : graphs_) c += b.exec != nullptr;
  for (const auto& [key, b] : verifies_) c += b.exec != nullptr;
  for (const auto& [key, b] : heads_) c += b.exec != nullptr;
  return c;
}

ForwardBatch DecodeGraphs::padded(const ForwardBatch& batch, int size, int tokens, bool every_row) const {
  ForwardBatch p = batch;
  for (int i = int(batch.seqs.size()); i < size; ++i) {
    SeqInBatch s;
    s.q_start = i * tokens;
    s.q_len = tokens;
    s.ctx_len = 0;
    s.block_table = {0};  // valid on the host; the upload marks it -1 on the device
    s.state_slot = 0;
    p.seqs.push_back(s);
    for (int j = 0; j < tokens; ++j) {
      p.token_ids.push_back(0);
      p.positions.push_back(j);
      if (every_row || j == tokens - 1) p.logit_rows.push_back(i * tokens + j);
    }
  }
  return p;
}

void DecodeGraphs::capture(Bucket& b, const ForwardBatch& batch, const std::function<void()>& forward) {
  if (b.exec) {
    (void)cudaGraphExecDestroy(b.exec);
    b.exec = nullptr;
  }
  b.generation = upload_batch_for_replay(batch);
  cudaGraph_t graph = nullptr;
  STRATA_CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  try {
    forward();
  } catch (...) {
    (void)cudaStreamEndCapture(stream(), &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    throw;
  }
  STRATA_CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  const cudaError_t e = cudaGraphInstantiate(&b.exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  check_cuda(e, "cudaGraphInstantiate");
}

void DecodeGraphs::launch(Bucket& b, const ForwardBatch& p, int real_seqs, const std::function<void()>& forward) {
  PaddingScope padding(real_seqs);
  if (b.runs == 0) {
    forward();  // eager: sizes the arena, warms cuBLASLt, allocates the outputs
  } else if (!b.exec) {
    capture(b, p, forward);
    STRATA_CUDA_CHECK(cudaGraphLaunch(b.exec, stream()));
  } else {
    const uint64_t generation = upload_batch_for_replay(p);
    if (generation != b.generation) capture(b, p, forward);  // the batch buffers moved
    STRATA_CUDA_CHECK(cudaGraphLaunch(b.exec, stream()));
  }
  ++b.runs;
}

Tensor DecodeGraphs::run(const ForwardBatch& batch, const Forward& forward) {
  STRATA_CHECK(eligible(batch), "DecodeGraphs: the batch is not a decode batch of at most ", buckets_.back(),
               " sequences");
  const int n = int(batch.seqs.size()), size = bucket_of(n);
  Bucket& b = graphs_[size];
  Tensor logits = logits_.rows(0, size);
  const ForwardBatch p = padded(batch, size);
  launch(b, p, n, [&] { forward(p, logits); });
  return logits_.rows(0, n);
}

Tensor DecodeGraphs::run_with_hidden(const ForwardBatch& batch, const ForwardWithHidden& forward, Tensor& hidden) {
  STRATA_CHECK(eligible_with_hidden(batch), "DecodeGraphs: the batch is not a verify batch of at most ",
               buckets_.back(), " sequences of at most ", kMaxTokensPerSeq, " tokens each with every row's logits");
  const int n = int(batch.seqs.size()), q = batch.seqs[0].q_len, size = bucket_of(n);
  Bucket& b = verifies_[{size, q, batch.state_steps.first, batch.state_steps.count}];
  Tensor logits = logits_.rows(0, int64_t(size) * q);
  const ForwardBatch p = padded(batch, size, q);
  // The first, eager run allocates `hidden` (outside its workspace); the graphs reuse it.
  launch(b, p, n, [&] { forward(p, logits, b.hidden); });
  hidden = b.hidden.rows(0, int64_t(n) * q);
  return logits_.rows(0, int64_t(n) * q);
}

Tensor DecodeGraphs::run_head(const ForwardBatch& batch, const Tensor& input, const HeadForward& forward,
                              Tensor& hidden) {
  STRATA_CHECK(eligible_head(batch), "DecodeGraphs: the batch is not a draft-head batch of at most ", buckets_.back(),
               " sequences of at most ", kMaxTokensPerSeq, " tokens each with the last row's logits");
  const int n = int(batch.seqs.size()), q = batch.seqs[0].q_len, size = bucket_of(n);
  const int64_t rows = int64_t(n) * q;
  STRATA_CHECK(input.ndim() == 2 && input.dim(0) == rows && input.device() == Device::kCuda,
               "DecodeGraphs: the head's input ", input.describe(), " for ", rows, " rows");
  const bool all_rows = q > 1 && every_row(batch, q);
  Bucket& b = heads_[{size, q, all_rows}];
  Tensor logits = logits_.rows(0, all_rows ? int64_t(size) * q : size);
  make_head_input(b, int64_t(size) * q, input);
  STRATA_CHECK(b.input.dtype() == input.dtype() && b.input.dim(1) == input.dim(1), "DecodeGraphs: the head's input ",
               input.describe(), " after ", b.input.describe());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(b.input.raw(), input.raw(), input.nbytes(), cudaMemcpyDeviceToDevice, stream()));
  const ForwardBatch p = padded(batch, size, q, all_rows);
  launch(b, p, n, [&] { forward(p, b.input, logits, b.hidden); });
  hidden = b.hidden.rows(0, rows);
  return logits_.rows(0, all_rows ? rows : n);
}

int DecodeGraphs::last_bucket(int max_seqs) const { return bucket_of(std::clamp(max_seqs, 1, buckets_.back())); }

void DecodeGraphs::make_head_input(Bucket& b, int64_t rows, const Tensor& like) {
  if (b.input.defined()) return;
  b.input = persistent({rows, like.dim(1)}, like.dtype());
  STRATA_CUDA_CHECK(cudaMemsetAsync(b.input.raw(), 0, b.input.nbytes(), stream()));
}

void DecodeGraphs::warm_decode(int max_seqs, const Forward& forward) {
  const int last = last_bucket(max_seqs);
  for (int size : buckets_) {
    if (size > last) break;
    Bucket& b = graphs_[size];
    Tensor logits = logits_.rows(0, size);
    const ForwardBatch p = padded(ForwardBatch{}, size);
    while (!b.exec) launch(b, p, 0, [&] { forward(p, logits); });
  }
}

Tensor DecodeGraphs::warm_verify(int max_seqs, int q, ForwardBatch::StateSteps state_steps,
                                 const ForwardWithHidden& forward) {
  STRATA_CHECK(q >= 1 && q <= kMaxTokensPerSeq, "DecodeGraphs: a verify of ", q, " tokens a sequence");
  const int last = last_bucket(max_seqs);
  Tensor hidden;
  for (int size : buckets_) {
    if (size > last || size * q > kMaxHiddenRows) break;
    Bucket& b = verifies_[{size, q, state_steps.first, state_steps.count}];
    Tensor logits = logits_.rows(0, int64_t(size) * q);
    ForwardBatch p = padded(ForwardBatch{}, size, q);
    p.state_steps = state_steps;
    while (!b.exec) launch(b, p, 0, [&] { forward(p, logits, b.hidden); });
    hidden = b.hidden;
  }
  return hidden;
}

void DecodeGraphs::warm_head(int max_seqs, int q, bool all_rows, const Tensor& input, const HeadForward& forward) {
  STRATA_CHECK(q >= 1 && q <= kMaxTokensPerSeq && (q > 1 || !all_rows), "DecodeGraphs: a head step of ", q,
               " tokens a sequence");
  const int last = last_bucket(max_seqs);
  for (int size : buckets_) {
    if (size > last || size * q > kMaxHiddenRows) break;
    Bucket& b = heads_[{size, q, all_rows}];
    Tensor logits = logits_.rows(0, all_rows ? int64_t(size) * q : size);
    make_head_input(b, int64_t(size) * q, input);
    const ForwardBatch p = padded(ForwardBatch{}, size, q, all_rows);
    while (!b.exec) launch(b, p, 0, [&] { forward(p, b.input, logits, b.hidden); });
  }
}

}  // namespace strata::ops::cuda
