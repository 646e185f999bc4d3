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

namespace {

// Whether `batch` feeds tokens, shifts positions or picks logit rows from CPU tensors.
bool device_parts_on_host(const ForwardBatch& batch) {
  return (!batch.feed_rows.empty() && batch.feed_ids.device() == Device::kCpu) ||
         (batch.shift.defined() && batch.shift.device() == Device::kCpu) ||
         (batch.pick.defined() && batch.pick.device() == Device::kCpu);
}

// The fed tokens, shifted positions and picked rows are on the host already: fill them in (the
// CUDA upload does it on the device).
ForwardBatch resolved_on_host(const ForwardBatch& batch) {
  ForwardBatch b = batch;
  b.validate_feed();
  for (size_t i = 0; i < b.feed_rows.size(); ++i) {
    b.token_ids[size_t(b.feed_rows[i])] = b.feed_ids.data<int32_t>()[b.feed_from[i]];
  }
  b.feed_rows.clear();
  b.feed_from.clear();
  b.feed_ids = Tensor();
  if (b.shift.defined()) {
    for (int64_t s = 0; s < b.shift.numel(); ++s) {
      const int32_t by = b.shift.data<int32_t>()[s];
      b.seqs[size_t(s)].ctx_len += by;
      b.positions[size_t(b.seqs[size_t(s)].q_start)] += by;
    }
    b.shift = Tensor();
  }
  if (b.pick.defined()) {
    for (int64_t s = 0; s < b.pick.numel(); ++s) {
      const SeqInBatch& seq = b.seqs[size_t(s)];
      const int32_t at = b.pick.data<int32_t>()[s];
      STRATA_CHECK(at >= 0 && at < seq.q_len, "batch: pick ", at, " for a sequence of ", seq.q_len, " tokens");
      b.logit_rows[size_t(s)] = seq.q_start + at;
    }
    b.pick = Tensor();
  }
  return b;
}

}  // namespace

const Tensor& ModelRunner::run(const ForwardBatch& batch, Caches& caches) {
  if (device_parts_on_host(batch)) return run(resolved_on_host(batch), caches);
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

int ModelRunner::capture_graphs(Caches& caches, int max_seqs, int verify_tokens, ForwardBatch::StateSteps state_steps,
                                bool dynamic_k) {
#if defined(STRATA_WITH_CUDA)
  if (!graphs_) return 0;
  graphs_->warm_decode(max_seqs, [&](const ForwardBatch& b, Tensor& out) { model_.forward(b, caches, out); });
  constexpr int kMaxQ = ops::cuda::DecodeGraphs::kMaxTokensPerSeq;
  if (verify_tokens > 0 && verify_tokens <= kMaxQ && model_.info().verify_graphs) {
    const auto verify = [&](const ForwardBatch& b, Tensor& out, Tensor& h) {
      model_.forward_with_hidden(b, caches, out, h);
    };
    const Tensor hidden = graphs_->warm_verify(max_seqs, verify_tokens, state_steps, verify);
    const auto head = [&](const ForwardBatch& b, const Tensor& in, Tensor& out, Tensor& h) {
      model_.mtp_forward_with_hidden(b, in, caches, out, h);
    };
    if (hidden.defined()) {
      graphs_->warm_head(max_seqs, 1, false, hidden, head);
      graphs_->warm_head(max_seqs, verify_tokens, true, hidden, head);
      if (dynamic_k) {
        // Dynamic K: verifies of fewer drafts, steps of none (one token a sequence, with the
        // hidden states) and the head's forwards over fewer tokens.
        for (int q = 2; q < verify_tokens; ++q) {
          graphs_->warm_verify(max_seqs, q, state_steps, verify);
          graphs_->warm_head(max_seqs, q, true, hidden, head);
        }
        graphs_->warm_verify(max_seqs, 1, ForwardBatch::StateSteps{}, verify);
      }
    }
  }
  return graphs_->captured();
#else
  (void)caches, (void)max_seqs, (void)verify_tokens, (void)state_steps, (void)dynamic_k;
  return 0;
#endif
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
  if (device_parts_on_host(batch)) return run_with_hidden(resolved_on_host(batch), caches, hidden);
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
  if (device_parts_on_host(batch)) return run_head(resolved_on_host(batch), input, caches, hidden);
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

void ModelRunner::write_head_kv(const ForwardBatch& batch, const Tensor& input, Caches& caches) {
  if (device_parts_on_host(batch)) return write_head_kv(resolved_on_host(batch), input, caches);
  model_.mtp_write_kv(batch, input, caches);
}

}  // namespace strata
