// Prompt logprobs (SamplingParams::prompt_logprobs): the log-softmax of a prompt position's raw
// logits, read at the next prompt token, and its top alternatives. Host-side, on the rows of the
// requests that ask for them.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/engine/output.h"

namespace strata {

// log sum exp(row) of one logits row [vocab], in double (shifted by the row's max), and
// log softmax(row)[target] = row[target] - that.
double log_partition(const float* row, int64_t vocab);
double token_logprob(const float* row, int64_t vocab, int32_t target);

// One logits row [vocab]: appends the logprob of `target` to `logprobs` and the `top` most
// likely tokens (logprob descending, then token id ascending) to `top_logprobs`.
void append_prompt_logprob(const float* row, int64_t vocab, int32_t target, int top,
                           std::vector<float>& logprobs,
                           std::vector<std::vector<TokenLogprob>>& top_logprobs);

}  // namespace strata
