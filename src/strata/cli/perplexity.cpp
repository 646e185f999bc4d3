// strata perplexity: the perplexity of a model on a text file, as llama.cpp's llama-perplexity
// measures it (non-overlapping windows of --ctx-size tokens, the second half of each scored;
// engine/perplexity.h). Prints the tokens scored, the mean negative log-likelihood and
// "PPL = x +/- y" (the standard error of the mean NLL, times the perplexity).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/engine/perplexity.h"
#include "strata/models/model.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

std::string read_text_file(const std::string& path) {
  STRATA_CHECK(std::filesystem::is_regular_file(path), "--file: '", path, "' is not a readable file");
  std::ifstream in(path, std::ios::binary);
  STRATA_CHECK(in, "--file: cannot open '", path, "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  STRATA_CHECK(!text.empty(), "--file: '", path, "' is empty");
  return text;
}

void write_nll_file(std::ofstream& out, const std::string& path, const std::vector<int32_t>& ids,
                    const PerplexityResult& r) {
  char line[96];
  for (const auto& t : r.scored) {
    std::snprintf(line, sizeof line, "%lld %d %.9f\n", (long long)t.index, ids[size_t(t.index)], t.nll);
    out << line;
  }
  STRATA_CHECK(out.good(), "--nll-file: write to '", path, "' failed");
}

int run(int argc, char** argv) {
  CLI::App app{"Perplexity of a model on a text file: non-overlapping windows of --ctx-size tokens, each run on "
               "its own; the second half of each window is scored (llama.cpp's llama-perplexity), or every "
               "token after the first with --score-all",
               "strata perplexity"};
  std::string model_dir, file, device = "cpu", ssm_dtype = "float32", kv_dtype = "auto";
  PerplexityOptions o;
  bool quiet = false;
  app.add_option("--model,-m", model_dir, "checkpoint folder with tokenizer.json (default: the bundled model)");
  app.add_option("--file,-f", file, "the text to score (UTF-8; tokenized whole, without special tokens added)")
      ->required();
  app.add_option("--ctx-size,-c", o.ctx_size, "tokens a window (default 512)");
  app.add_option("--chunks", o.max_windows, "score at most this many windows (default, 0 or -1: all)");
  app.add_flag("--score-all", o.score_all, "score every token of a window after its first, not only the second half");
  app.add_option("--device", device, "cpu | cuda (default cpu)");
  app.add_flag("--quiet", quiet, "no running perplexity per window on stderr");
  add_ssm_dtype_option(app, ssm_dtype);
  add_kv_cache_dtype_option(app, kv_dtype);
  std::string nll_file;
  app.add_option("--nll-file", nll_file,
                 "also write each scored token's NLL here, a line each: index in the file's tokens, token id, "
                 "NLL (runs of two weight formats compare token by token)");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(o.ctx_size >= 4, "--ctx-size: must be at least 4, got ", o.ctx_size);
  o.max_windows = std::max<int64_t>(o.max_windows, 0);  // llama.cpp's -1: all
  const Device dev = parse_device(device);
  const std::string dir = model_dir_or_default(model_dir);

  const std::string text = read_text_file(file);
  std::ofstream nll_out;
  if (!nll_file.empty()) {
    nll_out.open(nll_file);
    STRATA_CHECK(nll_out.is_open(), "--nll-file: cannot write '", nll_file, "'");
  }
  const Tokenizer tokenizer = Tokenizer::load(dir);
  LoadOptions load;
  load.device = dev;
  load.ssm_state_dtype = parse_ssm_state_dtype(ssm_dtype);
  load.kv_cache_dtype = parse_kv_cache_dtype(kv_dtype);
  auto model = load_model(dir, load);
  const int64_t max_len = model->info().max_position_embeddings;
  STRATA_CHECK(max_len <= 0 || o.ctx_size <= max_len, "--ctx-size: ", o.ctx_size,
               " is more than the model's max_position_embeddings (", max_len, ")");
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(text, false);
  } catch (const Error& e) {
    fail("--file: '", file, "': ", e.what());
  }
  STRATA_CHECK(int64_t(ids.size()) >= o.ctx_size, "--file: '", file, "' is ", ids.size(),
               " tokens, fewer than one window of --ctx-size ", o.ctx_size, " (a longer text or a smaller --ctx-size)");

  const int64_t windows = o.max_windows > 0 ? std::min<int64_t>(o.max_windows, int64_t(ids.size()) / o.ctx_size)
                                            : int64_t(ids.size()) / o.ctx_size;
  std::printf("perplexity: %s: %zu tokens, %lld windows of %lld tokens, scoring positions %lld..%lld of each\n",
              file.c_str(), ids.size(), (long long)windows, (long long)o.ctx_size,
              (long long)first_scored_position(o) + 1, (long long)o.ctx_size - 1);
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const PerplexityResult r = perplexity(*model, ids, o, [&](const PerplexityResult& p) {
    if (!quiet) std::fprintf(stderr, "[%lld]%.4f,", (long long)p.windows, p.perplexity());
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) std::fprintf(stderr, "\n");
  if (nll_out.is_open()) write_nll_file(nll_out, nll_file, ids, r);
  std::printf("tokens scored: %lld\n", (long long)r.tokens_scored);
  std::printf("mean NLL: %.9f +/- %.9f nats/token\n", r.mean_nll(), r.mean_nll_stderr());
  std::printf("PPL = %.4f +/- %.5f\n", r.perplexity(), r.perplexity_stderr());
  std::fprintf(stderr, "strata perplexity: %lld windows in %.2f s, %.1f tokens/s\n", (long long)r.windows, seconds,
               double(r.windows * o.ctx_size) / seconds);
  return 0;
}

const bool kRegistered = register_command({"perplexity", "perplexity of a model on a text file", run});

}  // namespace
}  // namespace strata::cli
