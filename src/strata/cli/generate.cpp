// strata generate: continuations of prompts, through the engine.
//   strata generate --prompt "The kernel" --max-tokens 48          (the bundled model)
//   strata generate --model DIR --ids 5,6,7 --max-tokens 16 --print-ids
//   strata generate --model DIR --ids-file prompts.jsonl --n 2 --temperature 0.8 --seed 1
// --prompt TEXT needs the folder's tokenizer.json and prints the prompt and its continuation
// as text. With --print-ids, stdout is one line of comma-separated generated ids per
// completion (prompts in order, then completions in index order); otherwise one descriptive
// line each.
// Unlike the API, --temperature defaults to 0 (greedy) so that runs are reproducible.
#include <CLI/CLI.hpp>

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

int run(int argc, char** argv) {
  CLI::App app{"Generate continuations of prompts given as token ids", "strata generate"};
  EngineOptions eo;
  SamplingOptions so;
  std::string ids_text, ids_file, prompt_text;
  bool print_ids = false;
  add_engine_options(app, eo);
  add_sampling_options(app, so, /*greedy_default=*/true);
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
  std::optional<Tokenizer> tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  if (prompt_opt->count()) {
    tokenizer.emplace(Tokenizer::load(config.model));
    prompts.push_back(tokenizer->encode(prompt_text, /*add_special=*/true));
    STRATA_CHECK(!prompts[0].empty(), "--prompt: the prompt is empty");
  } else if (ids_opt->count()) {
    prompts.push_back(parse_ids(ids_text, "--ids"));
  } else {
    prompts = read_ids_file(ids_file);
  }
  const SamplingParams params = sampling_params(so);
  LLM llm(config);
  if (tokenizer) llm.engine().set_detokenizer(std::make_shared<TokenizerDetokenizer>(*tokenizer));
  const std::vector<RequestOutput> outs = llm.generate(prompts, params);
  for (size_t i = 0; i < outs.size(); ++i) {
    for (const CompletionOutput& c : outs[i].outputs) {
      if (tokenizer && !print_ids) {
        if (outs[i].outputs.size() > 1) std::printf("--- completion %d (%s)\n", c.index, c.finish_reason.c_str());
        std::printf("%s%s\n", prompt_text.c_str(), c.text.c_str());
      } else if (print_ids) {
        std::printf("%s\n", join_ids(c.token_ids).c_str());
      } else {
        std::printf("prompt %zu completion %d (%s, %zu tokens, %d cached): %s\n", i, c.index,
                    c.finish_reason.c_str(), c.token_ids.size(), outs[i].metrics.num_cached_tokens,
                    join_ids(c.token_ids).c_str());
        for (size_t t = 0; t < c.logprobs.size(); ++t) {
          std::string alts;
          for (const TokenLogprob& a : c.top_logprobs[t]) alts += cat(" ", a.token_id, ":", a.logprob);
          std::printf("  token %d logprob %.6f top:%s\n", c.token_ids[t], c.logprobs[t], alts.c_str());
        }
      }
    }
  }
  return 0;
}

const bool kRegistered = register_command({"generate", "generate continuations of a text prompt or token ids", run});

}  // namespace
}  // namespace strata::cli
