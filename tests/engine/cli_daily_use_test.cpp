// The command line in daily use (issue 20): --version and help, the bundled model as every
// command's default, serve's positional model, the --help texts, detokenize's vocabulary check,
// info's page size, and the CPU KV default.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "cli_test_util.h"
#include "engine_test_util.h"
#include "strata/io/config.h"
#include "strata/io/npy.h"

namespace strata::testing {
namespace {

const std::string kDefaultModel = std::string(STRATA_SOURCE_DIR) + "/models/default";

// The --help line of `flag` (CLI11 may wrap the description onto the next line).
std::string help_of(const std::string& help, const std::string& flag) {
  const std::vector<std::string> lines = lines_of(help);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("  " + flag + " ", 0) == 0) return lines[i] + (i + 1 < lines.size() ? lines[i + 1] : "");
  }
  return "";
}

TEST(EngineCliDaily, VersionAndHelp) {
  const CliRun v = run_cli("--version");
  EXPECT_EQ(v.status, 0) << v.out;
  EXPECT_EQ(v.out.rfind("strata 0.1.0 (cpu", 0), 0u) << v.out;
  EXPECT_EQ(run_cli("version").out, v.out);
  const CliRun h = run_cli("help");
  EXPECT_EQ(h.status, 0) << h.out;
  for (const char* want : {"usage: strata <command>", "  generate", "  serve", "  chat-template"}) {
    EXPECT_NE(h.out.find(want), std::string::npos) << want << "\n" << h.out;
  }
  const CliRun hc = run_cli("help chat");
  EXPECT_EQ(hc.status, 0) << hc.out;
  EXPECT_NE(hc.out.find("Usage: strata chat"), std::string::npos) << hc.out;
  const CliRun bad = run_cli("help sideways");
  EXPECT_EQ(WEXITSTATUS(bad.status), 2) << bad.out;
  EXPECT_NE(bad.out.find("unknown command 'sideways'"), std::string::npos) << bad.out;
}

TEST(EngineCliDaily, HelpTextsGiveTheRealDefaults) {
  const CliRun chat = run_cli("chat --help"), gen = run_cli("generate --help");
  ASSERT_EQ(chat.status, 0);
  ASSERT_EQ(gen.status, 0);
  EXPECT_NE(help_of(chat.out, "--max-tokens").find("(default 256)"), std::string::npos) << chat.out;
  EXPECT_NE(help_of(gen.out, "--max-tokens").find("(default 16)"), std::string::npos) << gen.out;
  EXPECT_EQ(gen.out.find("given as token ids"), std::string::npos);
  EXPECT_NE(gen.out.find("Generate continuations of a text prompt (--prompt) or of token ids"), std::string::npos)
      << gen.out;
  for (const std::string* help : {&chat.out, &gen.out}) {
    EXPECT_EQ(help->find("{false}"), std::string::npos) << *help;
    EXPECT_NE(help_of(*help, "--enable-prefix-caching").find("(the default)"), std::string::npos) << *help;
    EXPECT_NE(help_of(*help, "--no-enable-prefix-caching").find("do not reuse"), std::string::npos) << *help;
    for (const char* flag : {"--device", "--block-size", "--max-num-seqs", "--max-num-batched-tokens",
                             "--max-model-len", "--kv-cache-memory", "--gpu-memory-utilization", "--temperature",
                             "--top-p", "--top-k", "--min-p", "--repetition-penalty", "--presence-penalty",
                             "--frequency-penalty", "--seed", "--n", "--min-tokens", "--load-format",
                             "--generation-config", "--prefix-state-interval", "--tensor-parallel-size"}) {
      EXPECT_NE(help_of(*help, flag).find("default"), std::string::npos) << flag << " gives no default:\n" << *help;
    }
  }
}

// tokenize, detokenize, chat-template, info and logits run on the bundled model without --model.
TEST(EngineCliDaily, EveryCommandDefaultsToTheBundledModel) {
  const CliRun t = run_cli("tokenize", "\"Hello world\"\n");
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_EQ(t.out, run_cli("tokenize --model " + kDefaultModel, "\"Hello world\"\n").out);
  const CliRun d = run_cli("detokenize", lines_of(t.out)[0] + "\n");
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(d.out, "\"Hello world\"\n");
  const CliRun c = run_cli("chat-template", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n");
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(c.out, "<|im_start|>user\nHi<|im_end|>\n");
  const CliRun i = run_cli("info");
  ASSERT_EQ(i.status, 0) << i.out;
  EXPECT_NE(i.out.find("models/default (qwen3_5_moe"), std::string::npos) << i.out;
  const std::string out = ::testing::TempDir() + "strata_cli_default_logits.npy";
  const CliRun l = run_cli("logits --ids 5,6,7 --out " + out);
  ASSERT_EQ(l.status, 0) << l.out;
  EXPECT_EQ(read_npy(out).dim(0), 3);
}

TEST(EngineCliDaily, DetokenizeRefusesAnIdOutsideTheVocabulary) {
  const CliRun d = run_cli("detokenize", "[5, 6]\n[7, 12288]\n");
  EXPECT_EQ(WEXITSTATUS(d.status), 1) << d.out;
  EXPECT_NE(d.out.find("stdin line 2: element 1: id 12288 is outside the vocabulary (12288 tokens)"),
            std::string::npos)
      << d.out;
  EXPECT_EQ(run_cli("detokenize", "[12287]\n").status, 0);
}

// `strata serve MODEL`, as `vllm serve MODEL`: the positional argument is the model folder.
TEST(EngineCliDaily, ServeTakesTheModelAsAPositionalArgument) {
  const CliRun r = run_cli("serve /nonexistent/model --port 0");
  EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not expected"), std::string::npos) << r.out;
  const CliRun both = run_cli("serve " + kDefaultModel + " --model " + kDefaultModel + " --port 0");
  EXPECT_EQ(WEXITSTATUS(both.status), 1) << both.out;
  EXPECT_NE(both.out.find("the model folder is given twice"), std::string::npos) << both.out;
}

TEST(EngineCliDaily, InfoPrintsTheEnginesPageSize) {
  const CliRun r = run_cli("info --load");
  ASSERT_EQ(r.status, 0) << r.out;
  // The default model: 2 attention layers of 1024 B/token; the engine's page is 16 tokens.
  EXPECT_NE(r.out.find("page of 16 tokens: 32.00 KiB"), std::string::npos) << r.out;
  EXPECT_NE(run_cli("info --load --block-size 128").out.find("page of 128 tokens: 256.00 KiB"), std::string::npos);
}

// The CPU KV default comes from the model and its context: 8 sequences of 8192 tokens and their
// state slots for the bundled model (141 MiB), where a fixed 1 GiB was taken before.
TEST(EngineCliDaily, CpuKvDefaultIsSizedFromTheModel) {
  const CliRun r = run_cli("generate --ids 5,6,7 --max-tokens 2 --print-ids");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("kv cache: 141.12 MiB budget (CPU default: 8 sequences of 8192 tokens; --kv-cache-memory "
                       "to change): 4096 pages of 16 tokens"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--max-num-seqs 256 runs at most 8 sequences at once here"), std::string::npos) << r.out;
  // A small budget lowers the slots with it, and says which flags it lowered.
  const CliRun small = run_cli("generate --ids 5,6,7 --max-tokens 2 --print-ids --kv-cache-memory 64M");
  ASSERT_EQ(small.status, 0) << small.out;
  EXPECT_NE(small.out.find("--prefix-state-slots lowered from 256 to 0 to fit; --max-num-seqs 256 lowered to 39"),
            std::string::npos)
      << small.out;
  const CliRun tiny = run_cli("generate --ids 5,6,7 --max-tokens 2 --kv-cache-memory 100K");
  EXPECT_EQ(WEXITSTATUS(tiny.status), 1) << tiny.out;
  EXPECT_NE(tiny.out.find("--kv-cache-memory 100.00 KiB cannot hold one state slot"), std::string::npos) << tiny.out;
}

}  // namespace
}  // namespace strata::testing
