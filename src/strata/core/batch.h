// ForwardBatch: the layout of one engine step, shared by the ops, the models and the engine.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/core/tensor.h"

namespace strata {

// One sequence's part of a batch.
struct SeqInBatch {
  int32_t q_start = 0;  // first row of this sequence in the flattened batch
  int32_t q_len = 0;    // new tokens this step
  int32_t ctx_len = 0;  // tokens already in the caches before this step
  // Physical page of each logical page; covers at least ctx_len + q_len tokens.
  std::vector<int32_t> block_table;
  // Recurrent-state slot; its state is read as the initial state (zeros when ctx_len == 0)
  // and holds the state after the last new token on return.
  int32_t state_slot = -1;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;  // [T], the new tokens of every sequence, concatenated
  std::vector<int32_t> positions;  // [T], position of each token in its sequence
  std::vector<SeqInBatch> seqs;
  std::vector<int32_t> logit_rows;  // rows of the batch whose logits are wanted, in order
  // Tokens the host does not know yet (the engine's overlapped scheduling): token_ids[feed_rows[i]]
  // is a placeholder for feed_ids[feed_from[i]], a draw of the previous step (I32, on the model's
  // device; ops.h's sample_tokens_begin). The CUDA upload copies them in on the device; the
  // engine's model runner fills them in on the CPU.
  std::vector<int32_t> feed_rows, feed_from;
  Tensor feed_ids;
  // Positions the host does not know yet (speculative decoding's draft chain, engine_spec_chain
  // .cpp): when defined, I32 [S] on the model's device, S <= seqs.size() (graph padding follows);
  // sequence s < S has ctx_len and position the host's plus shift[s]. Only for batches of one token a sequence, whose
  // block tables cover the shifted positions. Applied by the CUDA upload on the device, by the
  // model runner on the CPU.
  Tensor shift;
  // Logit rows the host does not know yet (the draft chain's first head forward, which wants each
  // sequence's row after its accepted drafts): when defined, I32 [S] on the model's device, S <=
  // seqs.size(); logit_rows holds one row a sequence (its placeholder) and sequence s < S's logit
  // row is q_start + pick[s] instead, pick[s] < q_len. Applied by the CUDA upload on the device, by
  // the model runner on the CPU.
  Tensor pick;
  // Speculative decoding's rollback without a replay (ModelInfo::state_step_tokens): with
  // count > 0 the forward also stores, for each sequence in state slot s that brings n tokens,
  // its recurrent state after its token j, for j < min(n - 1, count), in state slot
  // first + s * count + j (every state pool of the model, as ops::copy_slots copies them).
  struct StateSteps {
    int32_t first = -1, count = 0;
  } state_steps;

  int32_t num_tokens() const { return int32_t(token_ids.size()); }
  // Checks the batch is consistent (rows tile [0, T), pages cover every token, slots and
  // blocks in range); throws Error on a malformed batch.
  void validate(int block_size, int num_blocks, int num_slots) const;
  void validate_feed() const;  // the feed's rows and draws are in range, the shift's and pick's shapes
};

}  // namespace strata
