#include "strata/core/batch.h"

#include "strata/core/error.h"

namespace strata {

void ForwardBatch::validate(int block_size, int num_blocks, int num_slots) const {
  STRATA_CHECK(positions.size() == token_ids.size(), "batch: ", token_ids.size(), " tokens but ",
               positions.size(), " positions");
  int32_t row = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqInBatch& q = seqs[s];
    STRATA_CHECK(q.q_start == row && q.q_len > 0 && q.ctx_len >= 0,
                 "batch: sequence ", s, " rows [", q.q_start, ", +", q.q_len, ") do not follow row ", row);
    row += q.q_len;
    int64_t need = (int64_t(q.ctx_len) + q.q_len + block_size - 1) / block_size;
    STRATA_CHECK(int64_t(q.block_table.size()) >= need, "batch: sequence ", s, " has ",
                 q.block_table.size(), " pages for ", q.ctx_len + q.q_len, " tokens");
    for (int32_t b : q.block_table) {
      STRATA_CHECK(b >= 0 && b < num_blocks, "batch: sequence ", s, " page ", b, " out of range");
    }
    STRATA_CHECK(q.state_slot < num_slots, "batch: sequence ", s, " state slot ", q.state_slot,
                 " out of range");
  }
  STRATA_CHECK(row == num_tokens(), "batch: sequences cover ", row, " of ", num_tokens(), " rows");
  if (state_steps.count > 0) {
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t last = int64_t(state_steps.first) + int64_t(seqs[s].state_slot + 1) * state_steps.count;
      STRATA_CHECK(state_steps.first >= 0 && last <= num_slots, "batch: sequence ", s, "'s per-token states (slots ",
                   state_steps.first, " + ", state_steps.count, " a sequence slot) end past the ", num_slots, " slots");
    }
  }
  for (int32_t r : logit_rows) {
    STRATA_CHECK(r >= 0 && r < num_tokens(), "batch: logit row ", r, " out of range");
  }
  validate_feed();
}

void ForwardBatch::validate_feed() const {
  STRATA_CHECK(feed_rows.size() == feed_from.size() && (feed_rows.empty() || feed_ids.defined()),
               "batch: ", feed_rows.size(), " fed rows, ", feed_from.size(), " sources");
  for (size_t i = 0; i < feed_rows.size(); ++i) {
    STRATA_CHECK(feed_rows[i] >= 0 && feed_rows[i] < num_tokens() && feed_from[i] >= 0 &&
                     feed_from[i] < feed_ids.numel(),
                 "batch: fed row ", feed_rows[i], " from draw ", feed_from[i], " out of range");
  }
  if (pick.defined()) {
    STRATA_CHECK(pick.dtype() == DType::kI32 && pick.ndim() == 1 && pick.numel() <= int64_t(seqs.size()) &&
                     logit_rows.size() == seqs.size(),
                 "batch: pick ", pick.describe(), " for ", seqs.size(), " sequences and ", logit_rows.size(),
                 " logit rows");
  }
  if (!shift.defined()) return;
  STRATA_CHECK(shift.dtype() == DType::kI32 && shift.ndim() == 1 && shift.numel() <= int64_t(seqs.size()),
               "batch: shift ", shift.describe(), " for ", seqs.size(), " sequences");
  for (size_t s = 0; s < size_t(shift.numel()); ++s) {
    STRATA_CHECK(seqs[s].q_len == 1, "batch: a shifted batch brings one token a sequence, sequence ", s, " brings ",
                 seqs[s].q_len);
  }
}

}  // namespace strata
