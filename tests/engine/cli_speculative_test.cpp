// --speculative-config on the commands, as a user runs them: greedy text equal to the run
// without it, the bench's speculative line, and bad values named.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_util.h"

namespace strata::testing {
namespace {

const std::string kSmall = " --kv-cache-memory 256M --max-num-seqs 8";

// The text lines of a generate run: not its timing line, nor the load's progress lines that a
// slow load prints (on stderr, here too; their times differ from run to run).
std::string text_of(const std::string& out) {
  std::string text;
  for (const std::string& l : lines_of(out)) {
    if (l.rfind("strata", 0) != 0 && l.rfind("loading ", 0) != 0 && l.rfind("loaded ", 0) != 0) text += l + "\n";
  }
  return text;
}

TEST(SpeculativeCli, GenerateGivesTheSameGreedyText) {
  const std::string args = "generate --prompt 'The kernel' --max-tokens 40 --temperature 0 --ignore-eos" + kSmall;
  const CliRun plain = run_cli(args);
  ASSERT_EQ(plain.status, 0) << plain.out;
  const CliRun spec = run_cli(args + " --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'");
  ASSERT_EQ(spec.status, 0) << spec.out;
  EXPECT_EQ(text_of(plain.out), text_of(spec.out));
  EXPECT_NE(text_of(spec.out).find("The kernel"), std::string::npos) << spec.out;
}

TEST(SpeculativeCli, BenchPrintsAcceptance) {
  const CliRun r = run_cli("bench --num-prompts 2 --input-len 8 --output-len 16 --temperature 0 --max-model-len 64" +
                           kSmall + " --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* want : {"speculative: ", "acceptance rate", "mean acceptance length", "tokens per target forward"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " missing from:\n" << r.out;
  }
}

TEST(SpeculativeCli, BadConfigIsRefusedByName) {
  const CliRun bad = run_cli("generate --prompt hi --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2}'");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("'method'"), std::string::npos) << bad.out;
  const CliRun k = run_cli("generate --prompt hi --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 99}'");
  EXPECT_NE(k.status, 0);
  EXPECT_NE(k.out.find("'num_speculative_tokens'"), std::string::npos) << k.out;
}

}  // namespace
}  // namespace strata::testing
