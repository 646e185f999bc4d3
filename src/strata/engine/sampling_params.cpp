#include "strata/engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "strata/core/error.h"
#include "strata/core/field_error.h"
#include "strata/io/config.h"

namespace strata {

GenerationDefaults GenerationDefaults::load(const std::string& model_dir) {
  GenerationDefaults d;
  const std::string path = model_dir + "/generation_config.json";
  if (model_dir.empty() || !std::filesystem::exists(path)) return d;
  const nlohmann::json root = read_json_file(path);
  ConfigView v(&root, path);
  if (v.has("temperature")) d.temperature = v.get_float("temperature");
  if (v.has("top_p")) d.top_p = v.get_float("top_p");
  if (v.has("min_p")) d.min_p = v.get_float("min_p");
  if (v.has("repetition_penalty")) d.repetition_penalty = v.get_float("repetition_penalty");
  if (v.has("top_k")) d.top_k = int(std::clamp<int64_t>(v.get_int("top_k"), -1, INT32_MAX));
  d.eos_token_ids = v.get_int_or_list("eos_token_id");
  return d;
}

namespace {

void check_finite(double x, const char* field) {
  STRATA_CHECK_FIELD(std::isfinite(x), field, "sampling: ", field, " must be a finite number, got ",
                     x);
}

}  // namespace

ResolvedSampling resolve_sampling(const SamplingParams& p, const GenerationDefaults& defaults,
                                  const std::vector<int64_t>& model_eos, int64_t vocab_size) {
  ResolvedSampling r;
  r.params = p;
  STRATA_CHECK_FIELD(p.n >= 1, "n", "sampling: n must be >= 1, got ", p.n);
  STRATA_CHECK_FIELD(!(p.structured && p.ignore_eos), "ignore_eos",
                     "sampling: ignore_eos cannot be combined with a structured output (the grammar "
                     "ends the output with an end-of-sequence token)");
  r.n = p.n;
  r.temperature = p.temperature.value_or(defaults.temperature.value_or(1.0));
  check_finite(r.temperature, "temperature");
  STRATA_CHECK_FIELD(r.temperature >= 0, "temperature", "sampling: temperature must be >= 0, got ",
                     r.temperature);
  r.top_p = p.top_p.value_or(defaults.top_p.value_or(1.0));
  check_finite(r.top_p, "top_p");
  STRATA_CHECK_FIELD(r.top_p > 0 && r.top_p <= 1, "top_p",
                     "sampling: top_p must be in (0, 1], got ", r.top_p);
  const int top_k = p.top_k.value_or(defaults.top_k.value_or(0));
  STRATA_CHECK_FIELD(top_k >= -1, "top_k",
                     "sampling: top_k must be -1 or 0 (off) or a positive count, got ", top_k);
  r.top_k = top_k <= 0 ? 0 : int(std::min<int64_t>(top_k, vocab_size));
  r.min_p = p.min_p.value_or(defaults.min_p.value_or(0.0));
  check_finite(r.min_p, "min_p");
  STRATA_CHECK_FIELD(r.min_p >= 0 && r.min_p <= 1, "min_p",
                     "sampling: min_p must be in [0, 1], got ", r.min_p);
  r.repetition_penalty = p.repetition_penalty.value_or(defaults.repetition_penalty.value_or(1.0));
  check_finite(r.repetition_penalty, "repetition_penalty");
  STRATA_CHECK_FIELD(r.repetition_penalty > 0, "repetition_penalty",
                     "sampling: repetition_penalty must be > 0, got ", r.repetition_penalty);
  check_finite(p.presence_penalty, "presence_penalty");
  STRATA_CHECK_FIELD(p.presence_penalty >= -2 && p.presence_penalty <= 2, "presence_penalty",
                     "sampling: presence_penalty must be in [-2, 2], got ", p.presence_penalty);
  check_finite(p.frequency_penalty, "frequency_penalty");
  STRATA_CHECK_FIELD(p.frequency_penalty >= -2 && p.frequency_penalty <= 2, "frequency_penalty",
                     "sampling: frequency_penalty must be in [-2, 2], got ", p.frequency_penalty);
  for (const auto& [id, bias] : p.logit_bias) {
    STRATA_CHECK_FIELD(id >= 0 && id < vocab_size, "logit_bias", "sampling: logit_bias token id ",
                       id, " is outside the vocabulary [0, ", vocab_size, ")");
    check_finite(bias, "logit_bias");
    STRATA_CHECK_FIELD(bias >= -100 && bias <= 100, "logit_bias", "sampling: logit_bias for token ",
                       id, " must be in [-100, 100], got ", bias);
  }
  STRATA_CHECK_FIELD(p.max_tokens > 0, "max_tokens", "sampling: max_tokens must be > 0, got ",
                     p.max_tokens);
  STRATA_CHECK_FIELD(p.min_tokens >= 0 && p.min_tokens <= p.max_tokens, "min_tokens",
                     "sampling: min_tokens must be in [0, max_tokens = ", p.max_tokens, "], got ",
                     p.min_tokens);
  for (int32_t id : p.stop_token_ids) {
    STRATA_CHECK_FIELD(id >= 0 && id < vocab_size, "stop_token_ids",
                       "sampling: stop_token_ids: token id ", id, " is outside the vocabulary [0, ",
                       vocab_size, ")");
  }
  for (const std::string& s : p.stop) {
    STRATA_CHECK_FIELD(!s.empty(), "stop", "sampling: stop: stop strings must not be empty");
  }
  if (p.logprobs) {
    STRATA_CHECK_FIELD(*p.logprobs >= 0 && *p.logprobs <= kMaxLogprobs, "logprobs",
                       "sampling: logprobs must be in [0, ", kMaxLogprobs, "], got ", *p.logprobs);
  }
  if (p.prompt_logprobs) {
    STRATA_CHECK_FIELD(*p.prompt_logprobs >= 0 && *p.prompt_logprobs <= kMaxLogprobs, "prompt_logprobs",
                       "sampling: prompt_logprobs must be in [0, ", kMaxLogprobs, "], got ", *p.prompt_logprobs);
  }
  if (!p.ignore_eos) {
    for (int64_t e : model_eos) r.eos_ids.push_back(int32_t(e));
    for (int64_t e : defaults.eos_token_ids) r.eos_ids.push_back(int32_t(e));
    std::sort(r.eos_ids.begin(), r.eos_ids.end());
    r.eos_ids.erase(std::unique(r.eos_ids.begin(), r.eos_ids.end()), r.eos_ids.end());
  }
  return r;
}

}  // namespace strata
