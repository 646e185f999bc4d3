// strata generate and strata chat in daily use (issue 20): generation_config.json defaults,
// streamed text, stop strings, logprobs with text, the timing summary, the context and --n
// bounds; chat's commands, Ctrl-C, cut replies and a history that outgrows the context.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "cli_test_util.h"
#include "engine_test_util.h"
#include "strata/io/config.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDefaultModel = std::string(STRATA_SOURCE_DIR) + "/models/default";
const std::string kSmallCache = " --kv-cache-memory 64M --max-num-seqs 8";

// A copy of fixture `name` (links to its files) with `generation_config` as its
// generation_config.json.
std::string with_generation_config(const std::string& name, const nlohmann::json& generation_config) {
  const std::string src = engine_fixture_dir(name);
  const std::string dir = ::testing::TempDir() + "strata_cli_genconfig_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(src)) {
    if (entry.path().filename() != "generation_config.json") {
      fs::create_symlink(entry.path(), fs::path(dir) / entry.path().filename());
    }
  }
  std::ofstream(dir + "/generation_config.json") << generation_config.dump();
  return dir;
}

std::string last_line(const std::string& out) {
  const std::vector<std::string> lines = lines_of(out);
  return lines.empty() ? "" : lines.back();
}

// Unset sampling flags take generation_config.json's values, as vLLM's --generation-config auto.
TEST(EngineCliGenerate, SamplingDefaultsComeFromGenerationConfig) {
  const nlohmann::json ref = read_json_file(engine_fixture_dir("qwen3_5_moe_tiny") + "/reference.json");
  const std::string greedy = join_ids(ref.at("greedy_ids").get<std::vector<int32_t>>());
  const std::string args = " --ids " + join_ids(ref.at("prompt_ids").get<std::vector<int32_t>>()) +
                           " --max-tokens 16 --ignore-eos --print-ids --seed 3 --kv-cache-memory 32M";
  const std::string greedy_model = with_generation_config("qwen3_5_moe_tiny", {{"temperature", 0.0}});
  const CliRun from_config = run_cli("generate --model " + greedy_model + args);
  ASSERT_EQ(from_config.status, 0) << from_config.out;
  EXPECT_EQ(last_line(from_config.out), greedy) << "generation_config.json's temperature 0 not applied";
  // vllm: the neutral defaults (temperature 1) whatever the model ships.
  const CliRun neutral = run_cli("generate --model " + greedy_model + args + " --generation-config vllm");
  ASSERT_EQ(neutral.status, 0) << neutral.out;
  EXPECT_NE(last_line(neutral.out), greedy);
  // A folder: its generation_config.json instead of the model's.
  const CliRun folder =
      run_cli("generate --model " + engine_fixture_dir("qwen3_5_moe_tiny") + args + " --generation-config " + greedy_model);
  ASSERT_EQ(folder.status, 0) << folder.out;
  EXPECT_EQ(last_line(folder.out), greedy);
  // The fixture ships no temperature: sampling at 1, and --temperature 0 is greedy.
  EXPECT_NE(last_line(run_cli("generate --model " + engine_fixture_dir("qwen3_5_moe_tiny") + args).out), greedy);
  EXPECT_EQ(last_line(run_cli("generate --model " + engine_fixture_dir("qwen3_5_moe_tiny") + args +
                              " --temperature 0").out),
            greedy);
  const CliRun bad = run_cli("generate --ids 5,6 --generation-config /nonexistent");
  EXPECT_EQ(WEXITSTATUS(bad.status), 1) << bad.out;
  EXPECT_NE(bad.out.find("--generation-config: expected auto, vllm or a folder holding a generation_config.json"),
            std::string::npos)
      << bad.out;
}

TEST(EngineCliGenerate, StopStringsLogprobsAndTimingWithATextPrompt) {
  const nlohmann::json ref = read_json_file(kDefaultModel + "/reference/reference.json");
  const std::string prompt = ref.at("prompt_text").get<std::string>();
  const std::string greedy = ref.at("greedy_text").get<std::string>();  // " -1, and the errno variable is ..."
  const std::string base = "generate --prompt '" + prompt + "' --max-tokens 16 --temperature 0" + kSmallCache;
  const CliRun stop = run_cli(base + " --stop ' variable'");
  ASSERT_EQ(stop.status, 0) << stop.out;
  EXPECT_NE(stop.out.find(prompt + greedy.substr(0, greedy.find(" variable")) + "\n"), std::string::npos) << stop.out;
  EXPECT_EQ(stop.out.find(" variable"), std::string::npos) << stop.out;
  // The timing summary: prompt and decode tokens/s.
  const std::regex timing("strata generate: prompt \\d+ tokens \\(0 cached\\) in [0-9.]+ s, [0-9.]+ tok/s; "
                          "decode \\d+ tokens in [0-9.]+ s, ([0-9.]+|-) tok/s");
  EXPECT_TRUE(std::regex_search(stop.out, timing)) << stop.out;

  const CliRun lp = run_cli(base + " --logprobs 2 --ignore-eos");
  ASSERT_EQ(lp.status, 0) << lp.out;
  EXPECT_NE(lp.out.find(prompt + greedy + "\n"), std::string::npos) << lp.out;
  const std::vector<int32_t> ids = ref.at("greedy_ids").get<std::vector<int32_t>>();
  // One line per token: its id and text, its log-probability, two alternatives (the first is itself).
  const std::string first = cat("  token ", ids[0], " \" -\" logprob ");
  EXPECT_NE(lp.out.find(first), std::string::npos) << lp.out;
  const std::regex line("\\n  token \\d+ \"[^\\n]*\" logprob -?[0-9.]+ top: \\d+ \"[^\\n]*\":-?[0-9.]+ \\d+ \"");
  EXPECT_EQ(std::distance(std::sregex_iterator(lp.out.begin(), lp.out.end(), line), std::sregex_iterator()), 16)
      << lp.out;
}

// The continuation is printed as it is generated, not at the end.
TEST(EngineCliGenerate, TextStreamsAsItIsGenerated) {
  CliProcess p({"generate", "--prompt", "The kernel", "--max-tokens", "8000", "--ignore-eos", "--temperature", "0",
                "--kv-cache-memory", "64M", "--max-num-seqs", "2"});
  ASSERT_TRUE(p.read_until("The kernel", 60)) << p.output();
  const size_t start = p.output().find("The kernel");
  ASSERT_TRUE(p.read_at_least(start + 40, 60)) << p.output();
  EXPECT_TRUE(p.running()) << "8000 tokens should still be going:\n" << p.output();
  EXPECT_EQ(p.output().find("strata generate: prompt"), std::string::npos) << "finished already:\n" << p.output();
  p.signal(SIGKILL);
}

TEST(EngineCliGenerate, ContextOverflowAndNAreRefused) {
  // The bundled model's context is 8192 tokens; 3 prompt tokens + 8190 do not fit.
  const CliRun over = run_cli("generate --ids 5,6,7 --max-tokens 8190" + kSmallCache);
  EXPECT_EQ(WEXITSTATUS(over.status), 1) << over.out;
  EXPECT_NE(over.out.find("prompt 0: 3 prompt tokens + --max-tokens 8190 = 8193 exceed the context length of 8192 "
                          "(--max-model-len); lower --max-tokens to at most 8189"),
            std::string::npos)
      << over.out;
  const CliRun cut = run_cli("generate --ids 5,6,7 --max-tokens 20 --max-model-len 16" + kSmallCache);
  EXPECT_EQ(WEXITSTATUS(cut.status), 1) << cut.out;
  EXPECT_NE(cut.out.find("exceed the context length of 16 (--max-model-len)"), std::string::npos) << cut.out;
  EXPECT_EQ(run_cli("generate --ids 5,6,7 --max-tokens 13 --max-model-len 16 --print-ids" + kSmallCache).status, 0);
  for (const char* n : {"0", "129"}) {
    const CliRun r = run_cli(std::string("generate --ids 5,6 --n ") + n);
    EXPECT_EQ(WEXITSTATUS(r.status), 1) << r.out;
    EXPECT_NE(r.out.find(std::string("--n must be in [1, 128], got ") + n), std::string::npos) << r.out;
  }
}

TEST(EngineCliChat, AnswersHelpAndResetAndMarksACutReply) {
  const CliRun r = run_cli("chat --temperature 0 --max-tokens 3 --ignore-eos" + kSmallCache,
                           "/help\nHello\n/reset\nHi\n/exit\nnot read\n");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("commands: /help (this), /reset (forget the conversation), /exit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("strata chat: conversation reset"), std::string::npos) << r.out;
  const std::string cut = "[reply cut at --max-tokens 3]";
  const size_t first = r.out.find(cut);
  ASSERT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(cut, first + 1), std::string::npos) << "both replies are cut:\n" << r.out;
  // After /reset the second turn's prompt starts over: nothing of turn one is in its prefix.
  EXPECT_EQ(r.out.find("not read"), std::string::npos);
}

TEST(EngineCliChat, DropsTheOldestTurnsWhenTheHistoryOutgrowsTheContext) {
  const CliRun r = run_cli("chat --temperature 0 --max-tokens 4 --ignore-eos --max-model-len 64 --system 'Be brief.'" +
                               kSmallCache,
                           "Tell me about the kernel and its system calls\nAnd about files\nAnd processes\n"
                           "And signals, pipes and sockets, please\n");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("strata chat: the conversation outgrew the context of 64 tokens; dropped the oldest"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("error"), std::string::npos) << r.out;
  // One message alone longer than the context: refused, named, and the chat goes on.
  std::string huge;
  for (int i = 0; i < 40; ++i) huge += "kernel ";
  const CliRun big = run_cli("chat --temperature 0 --max-tokens 2 --max-model-len 32" + kSmallCache, huge + "\nHi\n");
  ASSERT_EQ(big.status, 0) << big.out;
  EXPECT_NE(big.out.find("the context holds 32 (--max-model-len)"), std::string::npos) << big.out;
  EXPECT_NE(big.out.find("[reply cut at --max-tokens 2]"), std::string::npos) << "the next turn runs:\n" << big.out;
}

// Ctrl-C while a reply streams stops that reply (it is marked) and the chat goes on; at the
// prompt it gives a fresh line.
TEST(EngineCliChat, CtrlCStopsTheReplyNotTheProgram) {
  CliProcess p({"chat", "--temperature", "0", "--max-tokens", "8000", "--ignore-eos", "--kv-cache-memory", "64M",
                "--max-num-seqs", "2"});
  ASSERT_TRUE(p.read_until("kv cache:", 60)) << p.output();
  ASSERT_TRUE(p.read_until("\n", 60));
  const size_t start = p.output().size();
  p.write("Tell me about the kernel\n");
  ASSERT_TRUE(p.read_at_least(start + 20, 60)) << "no reply streamed:\n" << p.output();
  p.signal(SIGINT);
  ASSERT_TRUE(p.read_until("[reply stopped by Ctrl-C]", 60)) << p.output();
  EXPECT_TRUE(p.running());
  // Ctrl-C at the prompt (give chat a moment to reach it) starts a fresh line, it does not quit.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  p.signal(SIGINT);
  EXPECT_TRUE(p.read_until("(/exit or Ctrl-D quits)", 60)) << p.output();
  EXPECT_TRUE(p.running());
  p.write("/help\n/exit\n");
  EXPECT_TRUE(p.read_until("commands: /help", 60)) << p.output();
  const int status = p.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << p.output();
  EXPECT_NE(p.output().find("prompt tokens looked up"), std::string::npos) << p.output();
}

}  // namespace
}  // namespace strata::testing
