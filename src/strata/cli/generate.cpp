// strata generate: greedy continuation of a prompt given as token ids.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"

namespace strata::cli {
namespace {

int32_t argmax(const float* v, int64_t n) {
  return int32_t(std::max_element(v, v + n) - v);  // the lowest index wins a tie
}

int run(int argc, char** argv) {
  CLI::App app{"Generate a continuation of a prompt", "strata generate"};
  std::string model_dir, ids_text, device = "cpu";
  int max_tokens = 16;
  double temperature = 0.0;
  bool ignore_eos = false, print_ids = false;
  app.add_option("--model", model_dir, "checkpoint folder (default: the bundled model)");
  app.add_option("--ids", ids_text, "prompt as comma-separated token ids")->required();
  app.add_option("--max-tokens", max_tokens, "tokens to generate");
  app.add_option("--temperature", temperature, "0 for greedy");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at end-of-sequence tokens");
  app.add_flag("--print-ids", print_ids, "print the generated ids, comma-separated, as the last line");
  app.add_option("--device", device, "cpu | cuda");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(max_tokens > 0, "--max-tokens must be positive, got ", max_tokens);
  STRATA_CHECK(temperature == 0.0, "--temperature: only greedy decoding (0) is available here");
  const std::vector<int32_t> prompt = parse_ids(ids_text, "--ids");
  auto model = load_model(model_dir_or_default(model_dir), parse_device(device));
  const ModelInfo& info = model->info();
  SingleSequence seq(*model, int64_t(prompt.size()) + max_tokens);
  Tensor logits = seq.append(prompt, false);
  std::vector<int32_t> out;
  while (int(out.size()) < max_tokens) {
    const int32_t next = argmax(logits.data<float>(), info.vocab_size);
    out.push_back(next);
    const bool eos = std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), next) !=
                     info.eos_token_ids.end();
    if ((eos && !ignore_eos) || int(out.size()) == max_tokens) break;
    logits = seq.append({next}, false);
  }
  if (print_ids) std::printf("%s\n", join_ids(out).c_str());
  return 0;
}

const bool kRegistered = register_command({"generate", "generate a continuation", run});

}  // namespace
}  // namespace strata::cli
