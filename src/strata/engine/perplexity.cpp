#include "strata/engine/perplexity.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/engine/prompt_logprobs.h"
#include "strata/engine/single_sequence.h"

namespace strata {

double PerplexityResult::mean_nll_stderr() const {
  if (tokens_scored < 2) return 0;
  const double n = double(tokens_scored), mean = nll_sum / n;
  const double var = std::max(0.0, nll_sq_sum / n - mean * mean);
  return std::sqrt(var / (n - 1));
}

int64_t first_scored_position(const PerplexityOptions& o) { return o.score_all ? 0 : o.ctx_size / 2; }

int64_t tokens_scored_per_window(const PerplexityOptions& o) { return o.ctx_size - 1 - first_scored_position(o); }

PerplexityResult perplexity(Model& model, const std::vector<int32_t>& ids, const PerplexityOptions& o,
                            const std::function<void(const PerplexityResult&)>& on_window) {
  STRATA_CHECK(o.ctx_size >= 2 && tokens_scored_per_window(o) >= 1, "perplexity: a window of ", o.ctx_size,
               " tokens scores no token");
  int64_t windows = int64_t(ids.size()) / o.ctx_size;
  STRATA_CHECK(windows >= 1, "perplexity: ", ids.size(), " tokens are fewer than one window of ", o.ctx_size);
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  const int64_t vocab = model.info().vocab_size, first = first_scored_position(o);
  PerplexityResult r;
  for (int64_t w = 0; w < windows; ++w) {
    const auto begin = ids.begin() + w * o.ctx_size;
    const std::vector<int32_t> window(begin, begin + o.ctx_size);
    for (int32_t id : window) {
      STRATA_CHECK(id >= 0 && id < vocab, "perplexity: token id ", id, " is outside the model's vocabulary of ", vocab);
    }
    const Tensor logits = sequence_logits(model, window, "full");
    for (int64_t i = first; i + 1 < o.ctx_size; ++i) {
      const double nll = -token_logprob(logits.data<float>() + i * vocab, vocab, window[size_t(i + 1)]);
      r.scored.push_back({w * o.ctx_size + i + 1, nll});
      r.nll_sum += nll;
      r.nll_sq_sum += nll * nll;
      ++r.tokens_scored;
    }
    ++r.windows;
    if (on_window) on_window(r);
  }
  return r;
}

}  // namespace strata
