// Perplexity of a model on a token sequence, as llama.cpp's llama-perplexity measures it: the
// tokens are cut into non-overlapping windows of ctx_size tokens (a shorter tail is dropped), each
// window runs through the model on its own (fresh caches, positions from 0), and the logits at
// window positions i = first .. ctx_size - 2 score the tokens at i + 1. first = ctx_size / 2
// (llama.cpp: the first half of a window is context only, so every scored token has at least
// ctx_size / 2 tokens before it) or 0 (score_all: every token of a window after its first).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "strata/models/model.h"

namespace strata {

struct PerplexityOptions {
  int64_t ctx_size = 512;
  bool score_all = false;   // score from window position 0, not ctx_size / 2
  int64_t max_windows = 0;  // 0: every whole window of the sequence
};

struct PerplexityResult {
  int64_t windows = 0, tokens_scored = 0;
  double nll_sum = 0, nll_sq_sum = 0;  // over the scored tokens, in nats
  struct Scored {
    int64_t index;  // of the token in the sequence
    double nll;
  };
  std::vector<Scored> scored;  // every scored token, in order

  double mean_nll() const { return nll_sum / double(tokens_scored); }
  double perplexity() const { return std::exp(mean_nll()); }
  // The standard error of mean_nll (the tokens' NLLs taken as independent samples), and of the
  // perplexity by the delta method (ppl * that): llama.cpp's "PPL = x +/- y".
  double mean_nll_stderr() const;
  double perplexity_stderr() const { return perplexity() * mean_nll_stderr(); }
};

// The first scored position of a window (see above) and the tokens a window scores.
int64_t first_scored_position(const PerplexityOptions& o);
int64_t tokens_scored_per_window(const PerplexityOptions& o);

// Runs the windows of `ids`; `on_window` (when set) sees the running result after each.
// Needs at least one whole window and 2 <= ctx_size (an Error otherwise).
PerplexityResult perplexity(Model& model, const std::vector<int32_t>& ids, const PerplexityOptions& o,
                            const std::function<void(const PerplexityResult&)>& on_window = {});

}  // namespace strata
