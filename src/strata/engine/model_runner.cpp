#include "strata/engine/model_runner.h"

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
  if (model_.device() == Device::kCpu) {
    model_.forward(batch, caches, host_logits_);
    return host_logits_;
  }
  Tensor logits;
#if defined(STRATA_WITH_CUDA)
  if (graphs_ && graphs_->eligible(batch)) {
    logits = graphs_->run(batch, [&](const ForwardBatch& b, Tensor& out) { model_.forward(b, caches, out); });
    ++graph_steps_;
  }
#endif
  if (!logits.defined()) {
    model_.forward(batch, caches, device_logits_);
    logits = device_logits_;
  }
  host_logits_ = logits.to(Device::kCpu);
  return host_logits_;
}

}  // namespace strata
