// strata perplexity, run as a user would, on the default model: the NLL it prints is the one
// computed here from `strata logits` of each window (an independent log-softmax), for the
// llama.cpp scoring (second half of each window), --score-all, --chunks and --nll-file; bad input is an error
// naming the flag or file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "strata/io/npy.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

const std::string kModel = std::string(STRATA_SOURCE_DIR) + "/models/default";

const char* const kText =
    "The kill() system call can be used to send any signal to any process group or process. If the "
    "signal is zero, no signal is sent, but error checking is still performed. The file system keeps "
    "the modification time of every file, and the shell prints it with the long listing format. "
    "Each user has a home directory, a login shell and a numeric user ID.\n";

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "strata_ppl_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The number after `key` in the command's output (NaN when absent).
double value_after(const std::string& out, const std::string& key) {
  const size_t at = out.find(key);
  return at == std::string::npos ? NAN : std::strtod(out.c_str() + at + key.size(), nullptr);
}

// The logits of each whole window of `ctx` tokens, each run alone through `strata logits`.
std::vector<Tensor> window_logits(const std::vector<int32_t>& ids, int64_t ctx) {
  std::vector<Tensor> out;
  const std::string path = ::testing::TempDir() + "strata_ppl_window.npy";
  for (int64_t w = 0; w < int64_t(ids.size()) / ctx; ++w) {
    const std::vector<int32_t> window(ids.begin() + w * ctx, ids.begin() + (w + 1) * ctx);
    const CliRun r = run_cli("logits --model " + kModel + " --ids " + join_ids(window) + " --out " + path);
    EXPECT_EQ(r.status, 0) << r.out;
    out.push_back(read_npy(path));
  }
  return out;
}

// Sum of -log softmax(logits[i])[ids[i + 1]] over window positions first .. ctx - 2 of the first
// `windows` windows.
struct Expected {
  double nll = 0;
  int64_t tokens = 0;
};
Expected expected_nll(const std::vector<int32_t>& ids, const std::vector<Tensor>& logits, int64_t ctx, int64_t first,
                      int64_t windows) {
  Expected e;
  for (int64_t w = 0; w < windows; ++w) {
    const int64_t vocab = logits[size_t(w)].dim(1);
    for (int64_t i = first; i + 1 < ctx; ++i) {
      const float* row = logits[size_t(w)].data<float>() + i * vocab;
      long double z = 0;
      for (int64_t v = 0; v < vocab; ++v) z += std::exp((long double)row[v]);
      e.nll += double(std::log(z) - (long double)row[ids[size_t(w * ctx + i + 1)]]);
      ++e.tokens;
    }
  }
  return e;
}

TEST(PerplexityCli, NllIsTheLogSoftmaxOfEachWindowsLogits) {
  const std::string file = write_temp("text.txt", kText);
  const std::vector<int32_t> ids = Tokenizer::load(kModel).encode(kText, false);
  const int64_t ctx = 16;
  ASSERT_GE(int64_t(ids.size()), 3 * ctx);
  struct Case {
    std::string flags;
    int64_t first, windows;
  };
  const int64_t all = int64_t(ids.size()) / ctx;
  const std::vector<Tensor> logits = window_logits(ids, ctx);
  for (const Case& c : {Case{"", ctx / 2, all}, Case{" --score-all", 0, all}, Case{" --chunks 2", ctx / 2, 2}}) {
    const CliRun r = run_cli("perplexity --model " + kModel + " --file " + file + " --ctx-size 16" + c.flags);
    ASSERT_EQ(r.status, 0) << r.out;
    const Expected e = expected_nll(ids, logits, ctx, c.first, c.windows);
    EXPECT_EQ(value_after(r.out, "tokens scored: "), double(e.tokens)) << c.flags << "\n" << r.out;
    EXPECT_EQ(e.tokens, c.windows * (ctx - 1 - c.first));
    const double mean = e.nll / double(e.tokens);
    EXPECT_NEAR(value_after(r.out, "mean NLL: "), mean, 1e-6 * mean) << c.flags << "\n" << r.out;
    EXPECT_NEAR(value_after(r.out, "PPL = "), std::exp(mean), 1e-4 * std::exp(mean)) << r.out;
    EXPECT_GT(value_after(r.out, "+/- "), 0) << r.out;
  }
  // --nll-file: a line per scored token (index, id, NLL) summing to the total.
  const std::string nlls = ::testing::TempDir() + "strata_ppl_nll.txt";
  const CliRun r = run_cli("perplexity --model " + kModel + " --file " + file + " --ctx-size 16 --nll-file " + nlls);
  ASSERT_EQ(r.status, 0) << r.out;
  std::ifstream in(nlls);
  int64_t index, id, lines = 0;
  double nll, sum = 0;
  while (in >> index >> id >> nll) {
    EXPECT_EQ(index % ctx, ctx / 2 + 1 + lines % (ctx - 1 - ctx / 2)) << lines;
    EXPECT_EQ(id, ids[size_t(index)]);
    sum += nll;
    ++lines;
  }
  EXPECT_EQ(double(lines), value_after(r.out, "tokens scored: "));
  EXPECT_NEAR(sum / double(lines), value_after(r.out, "mean NLL: "), 1e-7);
}

TEST(PerplexityCli, BadInputIsNamed) {
  const std::string text = write_temp("short.txt", kText), empty = write_temp("empty.txt", ""),
                    binary = write_temp("binary.txt", std::string("abc \xff\xfe def"));
  const std::string base = "perplexity --model " + kModel + " --file ";
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : {Case{base + text + ".missing", "--file: '" + text + ".missing'"},
                        Case{base + empty, "is empty"},
                        Case{base + binary, "--file: '" + binary + "': tokenizer: input is not valid UTF-8"},
                        Case{base + text + " --ctx-size 4096", "fewer than one window of --ctx-size 4096"},
                        Case{base + text + " --ctx-size 2", "--ctx-size: must be at least 4"},
                        Case{base + text + " --ctx-size 100000", "max_position_embeddings (8192)"},
                        Case{base + text + " --chunks x", "--chunks"},
                        Case{base + text + " --ctx-size many", "--ctx-size"},
                        Case{base + text + " --nll-file /nonexistent/dir/nll.txt", "--nll-file: cannot write"},
                        Case{"perplexity --model " + kModel, "--file"}}) {
    const CliRun r = run_cli(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace strata::testing
