// What a request asks of the sampler and the stop checks (vLLM / OpenAI semantics), the model's
// defaults from generation_config.json, and their validation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct StructuredOutput;  // engine/structured_output.h

// Fields left unset take the model's generation_config.json value, else the neutral default
// shown. Validation (resolve_sampling) names the offending field.
struct SamplingParams {
  int n = 1;                                // completions per prompt, >= 1
  std::optional<double> temperature;        // >= 0; 0 (below 1e-5) is greedy. Default 1.0
  std::optional<double> top_p;              // (0, 1]. Default 1.0 (off)
  std::optional<int> top_k;                 // -1 or 0: off; else >= 1. Default off
  std::optional<double> min_p;              // [0, 1]. Default 0 (off)
  std::optional<double> repetition_penalty; // > 0; 1 is off. On prompt + generated tokens
  double presence_penalty = 0.0;            // [-2, 2], on generated tokens
  double frequency_penalty = 0.0;           // [-2, 2], on generated tokens
  std::map<int32_t, double> logit_bias;     // token id -> bias in [-100, 100]
  std::optional<uint64_t> seed;             // reproducible sampling; unset: engine entropy
  int max_tokens = 16;                      // > 0
  int min_tokens = 0;                       // [0, max_tokens]: eos and stop ids masked before
  std::vector<int32_t> stop_token_ids;      // finish "stop", the token is kept in the output
  std::vector<std::string> stop;            // stop strings (need a Detokenizer)
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  // Log-probabilities of the sampled token plus this many top alternatives, [0, 20].
  std::optional<int> logprobs;
  // Log-probabilities of every prompt token after the first (given the tokens before it) plus
  // this many top alternatives, [0, 20]; from the raw logits. The request then computes its
  // whole prompt (no prefix-cache hit), as vLLM does.
  std::optional<int> prompt_logprobs;
  // Decode the output to text with the engine's Detokenizer when one is set.
  bool detokenize = true;
  // Structured output (response_format, guided_*): every completion follows the grammar and
  // ends ("stop") when it is complete. Any device; not with ignore_eos or speculative decoding.
  std::shared_ptr<const StructuredOutput> structured;
};

// Sampling defaults a model ships in generation_config.json.
struct GenerationDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::vector<int64_t> eos_token_ids;  // added to the model's config.json eos ids

  // Reads DIR/generation_config.json; a missing file gives empty defaults, a malformed one an
  // Error naming the file and field. do_sample is ignored, as vLLM does.
  static GenerationDefaults load(const std::string& model_dir);
};

// SamplingParams with every default filled in and every value checked.
struct ResolvedSampling {
  SamplingParams params;  // as given
  int n = 1;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;  // 0: off
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  std::vector<int32_t> eos_ids;  // empty when ignore_eos
  bool greedy() const { return temperature < 1e-5; }
};

constexpr int kMaxLogprobs = 20;

// Fills defaults and validates against the vocabulary; throws Error naming the field
// ("sampling: temperature must be >= 0, got -1").
ResolvedSampling resolve_sampling(const SamplingParams& p, const GenerationDefaults& defaults,
                                  const std::vector<int64_t>& model_eos, int64_t vocab_size);

}  // namespace strata
