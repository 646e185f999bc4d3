#include "strata/engine/llm.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "strata/core/error.h"

namespace strata {

LLM::LLM(const EngineConfig& config) : engine_(config) {}

LLM::LLM(std::shared_ptr<Model> model, const EngineConfig& config, GenerationDefaults defaults)
    : engine_(std::move(model), config, std::move(defaults)) {}

void accumulate_output(RequestOutput& whole, const RequestOutput& delta) {
  whole.request_id = delta.request_id;
  whole.finished = delta.finished;
  whole.metrics = delta.metrics;
  if (!delta.prompt_logprobs.empty()) {
    whole.prompt_logprobs = delta.prompt_logprobs;
    whole.prompt_top_logprobs = delta.prompt_top_logprobs;
  }
  for (const CompletionOutput& d : delta.outputs) {
    auto it = std::find_if(whole.outputs.begin(), whole.outputs.end(),
                           [&](const CompletionOutput& c) { return c.index == d.index; });
    if (it == whole.outputs.end()) {
      whole.outputs.push_back({});
      it = whole.outputs.end() - 1;
      it->index = d.index;
    }
    it->token_ids.insert(it->token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    it->logprobs.insert(it->logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    it->top_logprobs.insert(it->top_logprobs.end(), d.top_logprobs.begin(), d.top_logprobs.end());
    it->text += d.text;
    it->finish_reason = d.finish_reason;
    it->stop_reason = d.stop_reason;
  }
  std::sort(whole.outputs.begin(), whole.outputs.end(),
            [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompts,
                                         const SamplingParams& params) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine_.validate_request(prompts[i], params);
    } catch (const Error& e) {
      fail("prompt ", i, ": ", e.what());
    }
  }
  std::vector<RequestOutput> out(prompts.size());
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "llm-" + std::to_string(next_id_++);
    index[id] = i;
    engine_.add_request(id, prompts[i], params);
  }
  size_t left = prompts.size();
  while (left > 0) {
    for (const RequestOutput& d : engine_.step()) {
      auto it = index.find(d.request_id);
      if (it == index.end()) continue;  // a request added to engine() directly
      accumulate_output(out[it->second], d);
      if (d.finished) --left;
    }
  }
  return out;
}

}  // namespace strata
