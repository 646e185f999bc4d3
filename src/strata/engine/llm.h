// LLM: the offline API. Generates completions for a batch of prompts (token ids) and returns
// them whole, in prompt order:
//   strata::LLM llm({.model = "models/qwen3_5"});
//   auto outs = llm.generate({{1, 2, 3}, {4, 5}}, params);   // outs[i].outputs[j].token_ids
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "strata/engine/engine.h"

namespace strata {

class LLM {
 public:
  explicit LLM(const EngineConfig& config);
  LLM(std::shared_ptr<Model> model, const EngineConfig& config, GenerationDefaults defaults = {});

  // Every prompt and the params are checked before any runs (a bad one throws Error naming
  // its index). Each RequestOutput holds all tokens, logprobs and text of its n completions,
  // ordered by completion index.
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const SamplingParams& params);

  Engine& engine() { return engine_; }

 private:
  Engine engine_;
  uint64_t next_id_ = 0;
};

// Folds one step's delta into the whole output of a request.
void accumulate_output(RequestOutput& whole, const RequestOutput& delta);

}  // namespace strata
