// What the engine reports about a request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.f;
};

// One completion of a request (n > 1 gives several, told apart by index).
struct CompletionOutput {
  int index = 0;
  // From Engine::step: the tokens generated in this step only (a delta for streaming).
  // From LLM::generate: all generated tokens.
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;                         // per token, when logprobs was asked
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token, the top alternatives
  std::string text;           // like token_ids (delta or whole), when a Detokenizer is set
  std::string finish_reason;  // "" while running, else "stop", "length" or "abort"
  // Why it stopped: the stop string or stop token id that matched (empty for eos/length).
  std::string stop_reason;
  bool finished() const { return !finish_reason.empty(); }
};

struct RequestMetrics {
  // Seconds since the engine started (steady clock).
  double arrival_time = 0, first_scheduled_time = 0, first_token_time = 0, finished_time = 0;
  int32_t num_prompt_tokens = 0;
  // Prompt tokens served from the prefix cache at the request's first scheduling, and prompt
  // tokens it had to compute (all completions, including recomputation after preemption).
  int32_t num_cached_tokens = 0;
  int64_t num_computed_prompt_tokens = 0;
  int32_t num_preemptions = 0;
};

struct RequestOutput {
  std::string request_id;
  std::vector<CompletionOutput> outputs;  // step(): only completions that changed
  bool finished = false;                  // every completion has finished
  // With SamplingParams::prompt_logprobs: for prompt tokens 1..prompt_len-1 (the first has no
  // context), each one's logprob and the top alternatives. Reported once, in the first output
  // after the prompt is computed (accumulate_output keeps them).
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;
  RequestMetrics metrics;
};

}  // namespace strata
