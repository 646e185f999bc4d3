// strata generate: continuations of a text prompt or of token ids, through the engine.
//   strata generate --prompt "The kernel" --max-tokens 48          (the bundled model)
//   strata generate --model DIR --ids 5,6,7 --max-tokens 16 --temperature 0 --print-ids
//   strata generate --model DIR --ids-file prompts.jsonl --n 2 --temperature 0.8 --seed 1
// --prompt TEXT needs the folder's tokenizer.json; the prompt is printed and its continuation
// streams after it as it is generated (n > 1: each completion whole, at the end). With
// --print-ids, stdout is one line of comma-separated generated ids per completion (prompts in
// order, then completions in index order); otherwise one descriptive line each. Unset sampling
// flags take the model's generation_config.json values, as vLLM does (--generation-config);
// --temperature 0 is greedy. A timing summary (prompt and decode tokens/s) goes to stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/engine/detokenizer.h"
#include "strata/engine/llm.h"
#include "strata/io/config.h"

namespace strata::cli {
namespace {

// One JSON array of token ids per line; blank lines are skipped.
std::vector<std::vector<int32_t>> read_ids_file(const std::string& path) {
  std::ifstream in(path);
  STRATA_CHECK(in.good(), "--ids-file: cannot open '", path, "'");
  std::vector<std::vector<int32_t>> prompts;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = cat(path, ":", lineno);
    const nlohmann::json j = parse_json(line, where);
    STRATA_CHECK(j.is_array(), where, ": expected a JSON array of token ids, got ", json_type_name(j));
    std::vector<int32_t> ids;
    for (const nlohmann::json& v : j) {
      STRATA_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
                   where, ": token ids must be non-negative integers, got ", v.dump());
      ids.push_back(int32_t(v.get<int64_t>()));
    }
    prompts.push_back(std::move(ids));
  }
  STRATA_CHECK(!prompts.empty(), "--ids-file: '", path, "' holds no prompts");
  return prompts;
}

// The context must hold each prompt and all of --max-tokens: an overflow is refused, not cut.
void check_context(const std::vector<std::vector<int32_t>>& prompts, int max_tokens, int64_t max_model_len) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t need = int64_t(prompts[i].size()) + max_tokens;
    STRATA_CHECK(need <= max_model_len, "prompt ", i, ": ", prompts[i].size(), " prompt tokens + --max-tokens ",
                 max_tokens, " = ", need, " exceed the context length of ", max_model_len,
                 " (--max-model-len); lower --max-tokens",
                 int64_t(prompts[i].size()) < max_model_len
                     ? cat(" to at most ", max_model_len - int64_t(prompts[i].size())) : std::string(),
                 " or shorten the prompt");
  }
}

// Runs every prompt to its end; with `stream`, prints each step's text as it comes.
std::vector<RequestOutput> run_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                   const SamplingParams& params, bool stream) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      engine.validate_request(prompts[i], params);
    } catch (const Error& e) {
      fail("prompt ", i, ": ", e.what());
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(std::to_string(i), prompts[i], params);
  std::vector<RequestOutput> outs(prompts.size());
  while (engine.has_unfinished()) {
    for (const RequestOutput& d : engine.step()) {
      accumulate_output(outs[std::stoul(d.request_id)], d);
      if (!stream) continue;
      for (const CompletionOutput& c : d.outputs) std::fputs(c.text.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  return outs;
}

// "prompt 12 tokens (0 cached) in 0.021 s, 571 tok/s; decode 47 tokens in 0.210 s, 224 tok/s":
// prompt time from the first arrival to the last first token, decode time from the first first
// token to the last finish.
std::string timing_summary(const std::vector<RequestOutput>& outs) {
  int64_t prompt_tokens = 0, cached = 0, decoded = 0;
  double arrival = 1e300, first_token_min = 1e300, first_token_max = 0, finished = 0;
  for (const RequestOutput& o : outs) {
    prompt_tokens += o.metrics.num_prompt_tokens;
    cached += o.metrics.num_cached_tokens;
    arrival = std::min(arrival, o.metrics.arrival_time);
    first_token_min = std::min(first_token_min, o.metrics.first_token_time);
    first_token_max = std::max(first_token_max, o.metrics.first_token_time);
    finished = std::max(finished, o.metrics.finished_time);
    for (const CompletionOutput& c : o.outputs) decoded += std::max<int64_t>(0, int64_t(c.token_ids.size()) - 1);
  }
  const double prompt_s = std::max(first_token_max - arrival, 1e-9);
  const double decode_s = std::max(finished - first_token_min, 1e-9);
  return cat("prompt ", prompt_tokens, " tokens (", cached, " cached) in ", fixed(prompt_s, 3), " s, ",
             fixed(double(prompt_tokens) / prompt_s, 1), " tok/s; decode ", decoded, " tokens in ",
             fixed(decode_s, 3), " s, ", decoded ? fixed(double(decoded) / decode_s, 1) : std::string("-"),
             " tok/s");
}

void print_logprobs(const CompletionOutput& c, const Tokenizer* tokenizer) {
  auto token = [&](int32_t id) {
    if (!tokenizer) return std::to_string(id);
    const int32_t one[] = {id};
    return cat(id, " ", nlohmann::json(tokenizer->decode(one)).dump());
  };
  for (size_t t = 0; t < c.logprobs.size(); ++t) {
    std::string alts;
    for (const TokenLogprob& a : c.top_logprobs[t]) alts += cat(" ", token(a.token_id), ":", fixed(a.logprob, 6));
    std::printf("  token %s logprob %.6f top:%s\n", token(c.token_ids[t]).c_str(), c.logprobs[t], alts.c_str());
  }
}

int run(int argc, char** argv) {
  CLI::App app{"Generate continuations of a text prompt (--prompt) or of token ids (--ids, --ids-file)",
               "strata generate"};
  EngineOptions eo;
  SamplingOptions so;
  std::string ids_text, ids_file, prompt_text;
  bool print_ids = false;
  add_engine_options(app, eo);
  add_sampling_options(app, so);
  auto* ids_opt = app.add_option("--ids", ids_text, "prompt as comma-separated token ids");
  auto* file_opt = app.add_option("--ids-file", ids_file, "prompts, one JSON array of ids per line");
  auto* prompt_opt = app.add_option("--prompt", prompt_text, "prompt as text (needs the model's tokenizer.json)");
  ids_opt->excludes(file_opt);
  prompt_opt->excludes(ids_opt)->excludes(file_opt);
  app.add_flag("--print-ids", print_ids, "print only the generated ids, one line per completion");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(ids_opt->count() || file_opt->count() || prompt_opt->count(),
               "give the prompt with --prompt, --ids or --ids-file");
  const EngineConfig config = engine_config(eo);
  const SamplingParams params = sampling_params(so);
  std::optional<Tokenizer> tokenizer;
  if (prompt_opt->count() || !params.stop.empty()) tokenizer.emplace(Tokenizer::load(config.model));
  std::vector<std::vector<int32_t>> prompts;
  if (prompt_opt->count()) {
    prompts.push_back(tokenizer->encode(prompt_text, /*add_special=*/true));
    STRATA_CHECK(!prompts[0].empty(), "--prompt: the prompt is empty");
  } else if (ids_opt->count()) {
    prompts.push_back(parse_ids(ids_text, "--ids"));
  } else {
    prompts = read_ids_file(ids_file);
  }
  LLM llm(config);
  Engine& engine = llm.engine();
  if (tokenizer) engine.set_detokenizer(std::make_shared<TokenizerDetokenizer>(*tokenizer));
  check_context(prompts, params.max_tokens, engine.max_model_len());
  const bool text = prompt_opt->count() && !print_ids;
  const bool stream = text && params.n == 1;
  if (stream) std::fputs(prompt_text.c_str(), stdout);
  const std::vector<RequestOutput> outs = run_all(engine, prompts, params, stream);
  if (stream) std::fputs("\n", stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "strata generate: %s\n", timing_summary(outs).c_str());
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const CompletionOutput& c : outs[i].outputs) {
      if (print_ids) {
        std::printf("%s\n", join_ids(c.token_ids).c_str());
        continue;
      }
      if (text && !stream) {
        std::printf("--- completion %d (%s)\n%s%s\n", c.index, c.finish_reason.c_str(), prompt_text.c_str(),
                    c.text.c_str());
      } else if (!text) {
        std::printf("prompt %zu completion %d (%s, %zu tokens, %d cached): %s\n", i, c.index,
                    c.finish_reason.c_str(), c.token_ids.size(), outs[i].metrics.num_cached_tokens,
                    join_ids(c.token_ids).c_str());
      }
      print_logprobs(c, tokenizer ? &*tokenizer : nullptr);
    }
  }
  return 0;
}

const bool kRegistered = register_command({"generate", "generate continuations of a text prompt or token ids", run});

}  // namespace
}  // namespace strata::cli
