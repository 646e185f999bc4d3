// strata generate and strata bench, run as a user would.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>

#include "engine_test_util.h"
#include "strata/io/config.h"

namespace strata::testing {
namespace {

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  const std::string cmd = std::string(STRATA_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find('\n', i);
    if (j == std::string::npos) j = s.size();
    lines.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return lines;
}

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
                        std::to_string(expected.size()) + " --ignore-eos --print-ids --kv-cache-memory 32M");
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

}  // namespace
}  // namespace strata::testing
