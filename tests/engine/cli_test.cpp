// strata generate and strata bench, run as a user would.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <sys/wait.h>

#include "cli_test_util.h"
#include "engine_test_util.h"
#include "strata/io/config.h"
#include "strata/io/npy.h"

namespace strata::testing {
namespace {

TEST(EngineCli, GenerateMatchesHfGreedy) {
  const std::string dir = engine_fixture_dir("qwen3_5_moe_tiny");
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  const auto expected = ref.at("greedy_ids").get<std::vector<int32_t>>();
  const CliRun r = run_cli("generate --model " + dir + " --ids " + join_ids(prompt) +
                        " --max-tokens " + std::to_string(expected.size()) +
                        " --temperature 0 --ignore-eos --print-ids --kv-cache-memory 32M");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = lines_of(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), join_ids(expected)) << r.out;
  EXPECT_NE(r.out.find("kv cache:"), std::string::npos) << "capacity not logged: " << r.out;

  // --ids-file: one line of ids per prompt, in order.
  const std::string file = ::testing::TempDir() + "/strata_engine_prompts.jsonl";
  {
    std::ofstream f(file);
    f << "[5, 6, 7]\n\n" << ref.at("prompt_ids").dump() << "\n";
  }
  const CliRun m = run_cli("generate --model " + dir + " --ids-file " + file + " --max-tokens " +
                        std::to_string(expected.size()) + " --temperature 0 --ignore-eos --print-ids --kv-cache-memory 32M");
  ASSERT_EQ(m.status, 0) << m.out;
  const auto mlines = lines_of(m.out);
  ASSERT_GE(mlines.size(), 2u);
  EXPECT_EQ(mlines.back(), join_ids(expected));
  EXPECT_EQ(std::count(mlines.back().begin(), mlines.back().end(), ',') + 1, int(expected.size()));

  const CliRun bad = run_cli("generate --model " + dir + " --ids 5,6 --temperature -1");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("temperature"), std::string::npos) << bad.out;
  const CliRun bad_mem = run_cli("generate --model " + dir + " --ids 5,6 --kv-cache-memory 12Q");
  EXPECT_NE(bad_mem.status, 0);
  EXPECT_NE(bad_mem.out.find("--kv-cache-memory"), std::string::npos) << bad_mem.out;
}

TEST(EngineCli, BenchReportsThroughputAndLatency) {
  const std::string dir = engine_fixture_dir("qwen3_5_tiny");
  const CliRun r = run_cli("bench --model " + dir +
                        " --num-prompts 6 --input-len 24 --output-len 5 --kv-cache-memory 32M");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* want : {"output tokens/s", "TTFT ms: mean", "p99", "TPOT ms: mean"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " missing from:\n" << r.out;
  }
#if !defined(STRATA_WITH_CUDA)
  const CliRun roof = run_cli("bench --roofline --model " + dir);
  EXPECT_NE(roof.status, 0);
  EXPECT_NE(roof.out.find("needs the CUDA backend"), std::string::npos) << roof.out;
#endif
}


// The bundled default model: text prompts, chat, and the tokenizer commands, as a user runs them.
const std::string kDefaultModel = std::string(STRATA_SOURCE_DIR) + "/models/default";
const std::string kSmallCache = " --kv-cache-memory 256M --max-num-seqs 8";

TEST(EngineCli, PromptTextContinuesAsHfDoes) {
  const nlohmann::json ref = read_json_file(kDefaultModel + "/reference/reference.json");
  const std::string prompt = ref.at("prompt_text").get<std::string>();
  ASSERT_EQ(prompt.find('\''), std::string::npos);
  // The README's main job runs exactly this command line (tools/run_demo.sh), without --model.
  const CliRun r = run_cli("generate --prompt '" + prompt + "' --max-tokens 16 --temperature 0 --ignore-eos" +
                           kSmallCache);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find(prompt + ref.at("greedy_text").get<std::string>() + "\n"), std::string::npos) << r.out;
  const CliRun no_tok = run_cli("generate --model " + engine_fixture_dir("qwen3_5_tiny") + " --prompt hi");
  EXPECT_NE(no_tok.status, 0);
  EXPECT_NE(no_tok.out.find("tokenizer.json"), std::string::npos) << no_tok.out;
  EXPECT_NE(run_cli("generate --prompt hi --ids 1,2").status, 0);
}

TEST(EngineCli, ChatStreamsTurnsAndReusesTheHistory) {
  // A system message of several pages; a state snapshot at every page lets the second turn
  // resume from the first turn's pages (the template renders the first reply differently in
  // the history than the model saw it, so the shared prefix ends inside turn one).
  const std::string system = "You are a careful assistant who knows the Linux kernel, its system calls, "
                             "file descriptors, processes and signals, and explains them briefly.";
  const CliRun r = run_cli("chat --temperature 0 --max-tokens 8 --prefix-state-interval 1 --system '" + system +
                               "'" + kSmallCache,
                           "Hello there\n\nWhat is a file descriptor?\n");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = lines_of(r.out);
  // Two replies (the empty line is skipped), then the prefix-cache summary.
  ASSERT_GE(lines.size(), 3u) << r.out;
  const std::string summary = lines.back();
  long long looked = 0, served = 0;
  ASSERT_EQ(std::sscanf(summary.c_str(), "strata chat: %lld prompt tokens looked up, %lld", &looked, &served), 2)
      << r.out;
  EXPECT_GE(served, 32) << "the second turn starts with the first turn's system and user pages";
  EXPECT_LT(served, looked);
}

TEST(EngineCli, TokenizeDetokenizeAndChatTemplate) {
  const std::string dir = kDefaultModel;
  const CliRun t = run_cli("tokenize --model " + dir, "\"Hello world\"\n\"<|im_start|>x\"\n");
  ASSERT_EQ(t.status, 0) << t.out;
  const auto lines = lines_of(t.out);
  ASSERT_GE(lines.size(), 2u) << t.out;
  const nlohmann::json ids = nlohmann::json::parse(lines[0]);
  ASSERT_TRUE(ids.is_array() && !ids.empty()) << t.out;
  const CliRun d = run_cli("detokenize --model " + dir, ids.dump() + "\n");
  ASSERT_EQ(d.status, 0) << d.out;
  EXPECT_EQ(lines_of(d.out)[0], "\"Hello world\"");
  const CliRun c = run_cli("chat-template --model " + dir,
                           "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                           "\"add_generation_prompt\": true}\n");
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(c.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const CliRun bad = run_cli("chat-template --model " + dir, "{\"messages\": \n");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("stdin"), std::string::npos) << bad.out;
}


TEST(EngineCli, LogitsWritesNpyInEveryMode) {
  const std::string dir = engine_fixture_dir("qwen3_5_tiny");
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const Tensor expected = read_npy(dir + "/logits.npy");
  const std::string out = ::testing::TempDir() + "strata_cli_logits.npy";
  const std::string ids = join_ids(ref.at("prompt_ids").get<std::vector<int32_t>>());
  for (const char* mode : {"full", "stepwise", "chunked:7"}) {
    const CliRun r = run_cli("logits --model " + dir + " --ids " + ids + " --out " + out + " --mode " + mode);
    ASSERT_EQ(r.status, 0) << r.out;
    const Tensor got = read_npy(out);
    ASSERT_EQ(got.shape(), expected.shape()) << mode;
    double worst = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      worst = std::max(worst, double(std::fabs(got.data<float>()[i] - expected.data<float>()[i])));
    }
    EXPECT_LE(worst, 1e-3) << mode;
  }
  EXPECT_NE(run_cli("logits --model " + dir + " --ids 1,2 --out " + out + " --mode sideways").status, 0);
}


TEST(EngineCli, InfoPrintsTheMemoryPlanPerLayerType) {
  const CliRun r = run_cli("info --model " + std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/deepseek_v4_tiny");
  ASSERT_EQ(r.status, 0) << r.out;
  // float32 entries of head_dim 32 (128 B): the window KV per token; compressed KV 128 B per 4
  // or 128 tokens; indexer keys (index_head_dim 16) 64 B per 4 tokens.
  for (const char* want : {"weights          255 tensors", "sliding_attention              x2       128.00 B/token",
                           "compressed_sparse_attention    x2       176.00 B/token",
                           "heavily_compressed_attention   x1       129.00 B/token", "all layers",
                           "737.00 B/token", "not loaded     5 mtp.* tensors"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_NE(run_cli("info --model /nonexistent").status, 0);
  // An FP8 KV cache is the Qwen3.5 family's only: refused by name, not printed as if it applied.
  const CliRun fp8 = run_cli("info --model " + std::string(STRATA_SOURCE_DIR) +
                             "/tests/fixtures/deepseek_v4_tiny --kv-cache-dtype fp8");
  EXPECT_NE(fp8.status, 0);
  EXPECT_NE(fp8.out.find("--kv-cache-dtype fp8_e4m3 is not supported for deepseek_v4"), std::string::npos) << fp8.out;
}

// A bad config.json value (issue 20): `info --load`, generate and logits name the file and the
// field and exit 1, where a zero head count in text_config used to kill them with SIGFPE.
TEST(EngineCli, BadConfigValueIsNamedNotACrash) {
  namespace fs = std::filesystem;
  const std::string src = engine_fixture_dir("qwen3_5_moe_tiny");
  const std::string dir = ::testing::TempDir() + "strata_cli_bad_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(src)) {
    if (entry.path().filename() != "config.json") fs::create_symlink(entry.path(), fs::path(dir) / entry.path().filename());
  }
  nlohmann::json cfg = read_json_file(src + "/config.json");
  cfg["text_config"]["num_key_value_heads"] = 0;
  std::ofstream(dir + "/config.json") << cfg.dump(1);
  for (const std::string& cmd : {"info --load --model " + dir, "generate --model " + dir + " --ids 5,6 --max-tokens 2",
                                 "generate --load-format dummy --model " + dir + " --ids 5,6 --max-tokens 2",
                                 "logits --model " + dir + " --ids 5 --out " + dir + "/out.npy"}) {
    const CliRun r = run_cli(cmd);
    ASSERT_TRUE(WIFEXITED(r.status)) << cmd << ": killed by a signal\n" << r.out;
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find(dir + "/config.json: field 'text_config.num_key_value_heads': must be positive (got 0)"),
              std::string::npos)
        << cmd << ": " << r.out;
  }
  fs::remove_all(dir);
}

// --load-format dummy on every engine command and logits: a folder holding only config.json runs
// with random weights of its shapes; without the flag it is refused, and a bad value is named.
TEST(EngineCli, DummyLoadFormatNeedsOnlyTheConfig) {
  const std::string dir = ::testing::TempDir() + "strata_cli_config_only";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(engine_fixture_dir("qwen3_5_moe_tiny") + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string gen = "generate --model " + dir + " --ids 5,6,7 --max-tokens 4 --ignore-eos --print-ids" +
                          " --kv-cache-memory 32M";
  const CliRun r = run_cli(gen + " --load-format dummy");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = lines_of(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(std::count(lines.back().begin(), lines.back().end(), ','), 3) << r.out;
  EXPECT_EQ(run_cli(gen + " --load-format dummy --tensor-parallel-size 2").status, 0);

  const std::string out = ::testing::TempDir() + "strata_cli_dummy.npy";
  const CliRun l = run_cli("logits --model " + dir + " --ids 5,6,7 --mode stepwise --load-format dummy --out " + out);
  ASSERT_EQ(l.status, 0) << l.out;
  const int64_t vocab = read_npy(engine_fixture_dir("qwen3_5_moe_tiny") + "/logits.npy").dim(1);
  EXPECT_EQ(read_npy(out).shape(), (Shape{3, vocab}));
  const CliRun b = run_cli("bench --model " + dir + " --load-format dummy --num-prompts 2 --input-len 8 --output-len 2"
                           " --kv-cache-memory 32M");
  EXPECT_EQ(b.status, 0) << b.out;

  const CliRun without = run_cli(gen);
  EXPECT_NE(without.status, 0);
  EXPECT_NE(without.out.find("no model.safetensors.index.json and no *.safetensors"), std::string::npos) << without.out;
  for (const std::string& cmd : {gen, "logits --model " + dir + " --ids 5 --out " + out,
                                 "serve --model " + dir + " --port 0", "chat --model " + dir}) {
    const CliRun bad = run_cli(cmd + " --load-format pickle");
    EXPECT_NE(bad.status, 0) << cmd;
    EXPECT_NE(bad.out.find("--load-format: expected auto, safetensors or dummy, got 'pickle'"), std::string::npos)
        << cmd << ": " << bad.out;
  }
}

// --tensor-parallel-size (engine commands and logits) and --enable-expert-parallel: the same
// greedy ids as HF on 2 ranks, either way of splitting the experts; logits as one rank's.
TEST(EngineCli, TensorParallelFlags) {
  const std::string dir = engine_fixture_dir("qwen3_5_moe_tiny");
  const nlohmann::json ref = read_json_file(dir + "/reference.json");
  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  const auto expected = ref.at("greedy_ids").get<std::vector<int32_t>>();
  for (const char* ep : {"", " --enable-expert-parallel"}) {
    const CliRun r = run_cli("generate --model " + dir + " --ids " + join_ids(prompt) + " --max-tokens " +
                             std::to_string(expected.size()) +
                             " --temperature 0 --ignore-eos --print-ids --kv-cache-memory 32M --tensor-parallel-size 2" +
                             ep);
    ASSERT_EQ(r.status, 0) << r.out;
    const auto lines = lines_of(r.out);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back(), join_ids(expected)) << ep << ": " << r.out;
  }
  const std::string one = ::testing::TempDir() + "strata_cli_tp1.npy", two = ::testing::TempDir() + "strata_cli_tp2.npy";
  const std::string args = "logits --model " + dir + " --ids " + join_ids(prompt) + " --mode stepwise --out ";
  ASSERT_EQ(run_cli(args + one).status, 0);
  const CliRun r2 = run_cli(args + two + " --tensor-parallel-size 2 --enable-expert-parallel");
  ASSERT_EQ(r2.status, 0) << r2.out;
  const Tensor a = read_npy(one), b = read_npy(two);
  ASSERT_EQ(a.shape(), b.shape());
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  }
  std::printf("  logits TP=2 EP vs TP=1: max |d| = %.3g\n", worst);
  EXPECT_LE(worst, 1e-4);

  auto expect_refused = [](const std::string& cmd, const std::string& message) {
    const CliRun r = run_cli(cmd);
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.out.find(message), std::string::npos) << cmd << ": " << r.out;
  };
  expect_refused("generate --model " + dir + " --ids 5,6 --tensor-parallel-size 2 --device cuda",
                 "--tensor-parallel-size 2: tensor parallelism runs on --device cpu only");
  expect_refused("serve --model " + dir + " --port 0 --tensor-parallel-size 2 --device cuda",
                 "--tensor-parallel-size 2: tensor parallelism runs on --device cpu only");
  expect_refused("logits --model " + dir + " --ids 5 --out " + two + " --tensor-parallel-size 4 --device cuda",
                 "tensor parallelism runs on --device cpu only");
  expect_refused("generate --model " + dir + " --ids 5,6 --enable-expert-parallel",
                 "--enable-expert-parallel needs --tensor-parallel-size > 1");
  expect_refused("bench --model " + dir + " --num-prompts 1 --tensor-parallel-size 0",
                 "--tensor-parallel-size must be >= 1");
  // 3 ranks do not divide the 4 attention heads.
  expect_refused("generate --model " + dir + " --ids 5,6 --tensor-parallel-size 3", "num_attention_heads");
}

}  // namespace
}  // namespace strata::testing
