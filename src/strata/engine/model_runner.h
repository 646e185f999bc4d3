// How the engine runs the model for one step: on CUDA, decode steps (one new token and one
// logits row per sequence) replay CUDA graphs padded to batch buckets when the model allows it
// (ModelInfo::cuda_graphs) and the engine was not told --enforce-eager, and so do speculative
// verify steps of equal-length sequences (run_with_hidden, ModelInfo::verify_graphs) and the
// draft head's steps of equal-length sequences (run_head); every other step runs eagerly. The
// logits stay on the model's device, where the engine samples them.
#pragma once

#include <memory>

#include "strata/core/batch.h"
#include "strata/core/tensor.h"
#include "strata/models/model.h"

namespace strata {

namespace ops::cuda {
class DecodeGraphs;
}

class ModelRunner {
 public:
  ModelRunner(Model& model, bool enforce_eager);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // The batch's logits [batch.logit_rows.size(), vocab] F32 on the model's device, valid until
  // the next run.
  const Tensor& run(const ForwardBatch& batch, Caches& caches);
  // run with the final-norm hidden state of every row too (Model::forward_with_hidden;
  // speculative decoding), fed tokens too (dynamic K's overlapped steps). A batch of sequences of
  // equal length (1 to 16 tokens)
  // that wants every row's logits replays a verify graph when the model allows it
  // (ModelInfo::verify_graphs): `hidden` is then a view of the graph's buffer, valid until the
  // next run of that shape.
  const Tensor& run_with_hidden(const ForwardBatch& batch, Caches& caches, Tensor& hidden);
  // Whether run_with_hidden would replay a verify graph for `batch`.
  bool graphs_with_hidden(const ForwardBatch& batch) const;
  // The draft head's forward (Model::mtp_forward_with_hidden) on the hidden states `input`: the
  // logits of batch.logit_rows on the model's device, and the head's hidden state of every row in
  // `hidden`. A batch of sequences of equal length (1 to 16 tokens) that wants each one's last
  // row, or (more than one token) every row, replays a head graph when the model allows it
  // (ModelInfo::cuda_graphs for one token a sequence, verify_graphs for more); both are then
  // views of the graph's buffers, valid until the next run of that shape. The batch may feed
  // its tokens and shift its positions (core/batch.h).
  const Tensor& run_head(const ForwardBatch& batch, const Tensor& input, Caches& caches, Tensor& hidden);
  // The draft head's KV at the batch's positions alone (Model::mtp_write_kv), eagerly: its
  // catch-ups, whose outputs nobody reads.
  void write_head_kv(const ForwardBatch& batch, const Tensor& input, Caches& caches);
  // Whether run_head would replay a head graph for `batch`.
  bool graphs_for_head(const ForwardBatch& batch) const;
  // Start-up capture on CUDA (graphs, not --enforce-eager), as vLLM's: the decode graphs of
  // every batch bucket up to max_seqs sequences and, with verify_tokens > 0 (speculative
  // decoding where ModelInfo::verify_graphs holds), the verify graphs of verify_tokens tokens a
  // sequence storing the per-token states `state_steps`, and the head graphs the draft chain
  // replays (one token a sequence; verify_tokens tokens, every row's logits); with
  // dynamic_k (dynamic K) also the verifies and head steps of every length in between and the
  // one-token steps with hidden states (steps without drafts). Captured on padding sequences,
  // which touch no page or slot of `caches`. Returns the graphs captured.
  int capture_graphs(Caches& caches, int max_seqs, int verify_tokens, ForwardBatch::StateSteps state_steps,
                     bool dynamic_k = false);
  // Whether steps of the right shapes replay CUDA graphs (CUDA, ModelInfo::cuda_graphs, not
  // --enforce-eager).
  bool uses_graphs() const { return graphs_ != nullptr; }
  // Decode and verify steps run as graphs so far (0 without graphs).
  int64_t graph_steps() const { return graph_steps_; }
  // Draft-head forwards run as graphs so far.
  int64_t head_graph_steps() const { return head_graph_steps_; }

 private:
  Model& model_;
  std::unique_ptr<ops::cuda::DecodeGraphs> graphs_;
  Tensor logits_, graph_logits_, head_logits_, head_hidden_, head_graph_logits_;
  int64_t graph_steps_ = 0, head_graph_steps_ = 0;
};

}  // namespace strata
