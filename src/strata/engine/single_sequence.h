// One sequence run through a model with its own caches: the simplest way to drive a Model
// (the logits CLI and tests). Pages are assigned contiguously; the state uses slot 0.
#pragma once

#include <vector>

#include "strata/models/model.h"

namespace strata {

class SingleSequence {
 public:
  // Room for max_tokens tokens, in pages of block_size.
  SingleSequence(Model& model, int64_t max_tokens, int block_size = 16);

  // Appends `ids` in one forward; returns float32 logits [ids.size(), vocab] when all_rows,
  // else [1, vocab] for the last token.
  Tensor append(const std::vector<int32_t>& ids, bool all_rows);
  int64_t length() const { return length_; }

 private:
  Model& model_;
  Caches caches_;
  std::vector<int32_t> block_table_;
  int64_t length_ = 0;
};

// Logits [ids.size(), vocab] on the host (a GPU model's copied back) for every position,
// computed in `mode`: "full" (one forward),
// "stepwise" (one token per forward through the caches) or "chunked:N" (N per forward).
Tensor sequence_logits(Model& model, const std::vector<int32_t>& ids, const std::string& mode);

}  // namespace strata
