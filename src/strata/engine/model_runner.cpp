#include "strata/engine/model_runner.h"

#include "strata/core/error.h"

#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/graphs.h"
#else
namespace strata::ops::cuda {
class DecodeGraphs {};  // never made without the CUDA backend; complete for ~unique_ptr
}  // namespace strata::ops::cuda
#endif

namespace strata {

ModelRunner::ModelRunner(Model& model, bool enforce_eager) : model_(model) {
#if defined(STRATA_WITH_CUDA)
  if (model.device() == Device::kCuda && model.info().cuda_graphs && !enforce_eager) {
    graphs_ = std::make_unique<ops::cuda::DecodeGraphs>(model.info().vocab_size);
  }
#else
  (void)enforce_eager;
#endif
}

ModelRunner::~ModelRunner() = default;

const Tensor& ModelRunner::run(const ForwardBatch& batch, Caches& caches) {
  if (!batch.feed_rows.empty() && batch.feed_ids.device() == Device::kCpu) {
    // The draws are on the host already: fill them in (the CUDA upload does it on the device).
    ForwardBatch fed = batch;
    fed.validate_feed();
    for (size_t i = 0; i < fed.feed_rows.size(); ++i) {
      fed.token_ids[size_t(fed.feed_rows[i])] = fed.feed_ids.data<int32_t>()[fed.feed_from[i]];
    }
    fed.feed_rows.clear();
    fed.feed_from.clear();
    fed.feed_ids = Tensor();
    return run(fed, caches);
  }
#if defined(STRATA_WITH_CUDA)
  if (graphs_ && graphs_->eligible(batch)) {
    graph_logits_ = graphs_->run(batch, [&](const ForwardBatch& b, Tensor& out) { model_.forward(b, caches, out); });
    ++graph_steps_;
    return graph_logits_;
  }
#endif
  model_.forward(batch, caches, logits_);
  return logits_;
}

bool ModelRunner::graphs_with_hidden(const ForwardBatch& batch) const {
#if defined(STRATA_WITH_CUDA)
  return graphs_ && model_.info().verify_graphs && graphs_->eligible_with_hidden(batch);
#else
  (void)batch;
  return false;
#endif
}

const Tensor& ModelRunner::run_with_hidden(const ForwardBatch& batch, Caches& caches, Tensor& hidden) {
  STRATA_CHECK(batch.feed_rows.empty(), "model runner: a forward with hidden states feeds no tokens");
#if defined(STRATA_WITH_CUDA)
  if (graphs_with_hidden(batch)) {
    graph_logits_ = graphs_->run_with_hidden(
        batch, [&](const ForwardBatch& b, Tensor& out, Tensor& h) { model_.forward_with_hidden(b, caches, out, h); },
        hidden);
    ++graph_steps_;
    return graph_logits_;
  }
#endif
  model_.forward_with_hidden(batch, caches, logits_, hidden);
  return logits_;
}

bool ModelRunner::graphs_for_head(const ForwardBatch& batch) const {
#if defined(STRATA_WITH_CUDA)
  return graphs_ && graphs_->eligible_head(batch) && (batch.seqs[0].q_len == 1 || model_.info().verify_graphs);
#else
  (void)batch;
  return false;
#endif
}

const Tensor& ModelRunner::run_head(const ForwardBatch& batch, const Tensor& input, Caches& caches, Tensor& hidden) {
#if defined(STRATA_WITH_CUDA)
  if (graphs_for_head(batch)) {
    head_graph_logits_ = graphs_->run_head(
        batch, input,
        [&](const ForwardBatch& b, const Tensor& in, Tensor& out, Tensor& h) {
          model_.mtp_forward_with_hidden(b, in, caches, out, h);
        },
        hidden);
    ++head_graph_steps_;
    return head_graph_logits_;
  }
#endif
  model_.mtp_forward_with_hidden(batch, input, caches, head_logits_, head_hidden_);
  hidden = head_hidden_;
  return head_logits_;
}

}  // namespace strata
