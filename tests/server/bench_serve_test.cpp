// strata bench serve against a real `strata serve` (the bundled default model on the CPU, on a
// free loopback port): random and ShareGPT datasets, both endpoints, the result file, and the
// errors of bad options, an unreachable server and failing requests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace strata::testing {
namespace {

using nlohmann::json;

constexpr const char* kKey = "sk-bench-serve-test";

struct CliRun {
  int status = -1;  // the exit code; -1 when killed by a signal
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
  const int st = pclose(p);
  r.status = WIFEXITED(st) && WEXITSTATUS(st) < 128 ? WEXITSTATUS(st) : -1;
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

json read_json(const std::string& path) { return json::parse(read_text(path)); }

// A loopback port that nothing listens on: bound, then closed.
int closed_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return 1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

class BenchServe : public ::testing::Test {
 protected:
  // One `strata serve --port 0` per test process; its address is read from its log.
  static void SetUpTestSuite() {
    // One log per test process: ctest runs the tests of this suite in parallel processes.
    log_ = ::testing::TempDir() + "strata_bench_serve_server_" + std::to_string(getpid()) + ".log";
    std::vector<std::string> args = {STRATA_BINARY, "serve", "--port", "0", "--kv-cache-memory", "1G",
                                     "--max-num-seqs", "64", "--api-key", kKey, "--served-model-name", "tiny"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int rc = posix_spawn(&pid_, STRATA_BINARY, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      pid_ = -1;
      return;
    }
    const std::regex re(R"(on http://127\.0\.0\.1:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string log = read_text(log_);
      if (std::regex_search(log, m, re)) {
        port_ = std::stoi(m[1].str());
        return;
      }
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  static void TearDownTestSuite() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "strata serve did not stop cleanly:\n" << read_text(log_);
    pid_ = -1;
    for (const std::string& f : temps_) std::remove(f.c_str());
    std::remove(log_.c_str());
  }

  void SetUp() override { ASSERT_GT(port_, 0) << "strata serve did not start:\n" << read_text(log_); }

  static std::string target() {
    return std::string("--base-url http://127.0.0.1:") + std::to_string(port_) + " --api-key " + kKey;
  }
  static std::string temp(const std::string& name) {
    temps_.push_back(::testing::TempDir() + "strata_bench_serve_" + std::to_string(getpid()) + "_" + name);
    return temps_.back();
  }

  static inline pid_t pid_ = -1;
  static inline int port_ = 0;
  static inline std::string log_;
  static inline std::vector<std::string> temps_;  // removed at the end
};

int64_t sum(const json& a) {
  int64_t s = 0;
  for (const json& x : a) s += x.get<int64_t>();
  return s;
}

TEST_F(BenchServe, RandomPromptsOnCompletions) {
  const std::string file = temp("random.json");
  const CliRun r = run_cli("bench serve " + target() + " --dataset-name random --num-prompts 8 "
                           "--random-input-len 16 --random-output-len 8 --max-concurrency 4 --ignore-eos "
                           "--seed 1 --result-file " + file);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Serving Benchmark Result"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Successful requests:                     8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Mean TPOT (ms):"), std::string::npos) << r.out;
  const json j = read_json(file);
  EXPECT_EQ(j["model_id"], "tiny");
  EXPECT_EQ(j["completed"], 8);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_input_tokens"], 8 * 16);
  EXPECT_EQ(j["total_output_tokens"], 8 * 8);
  EXPECT_EQ(j["input_lens"], json(std::vector<int>(8, 16)));
  EXPECT_EQ(j["output_lens"], json(std::vector<int>(8, 8)));
  EXPECT_EQ(j["errors"], json(std::vector<std::string>(8, "")));
  EXPECT_EQ(j["config"]["max_concurrency"], 4);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_GE(j["max_concurrent_requests"].get<int>(), 1);
  EXPECT_LE(j["max_concurrent_requests"].get<int>(), 4);
  const double duration = j["duration"];
  EXPECT_GT(duration, 0);
  EXPECT_NEAR(j["request_throughput"].get<double>(), 8 / duration, 1e-9);
  EXPECT_NEAR(j["output_throughput"].get<double>(), 64 / duration, 1e-9);
  EXPECT_NEAR(j["total_token_throughput"].get<double>(), (128 + 64) / duration, 1e-9);
  for (const char* m : {"ttft", "tpot", "itl", "e2el"}) {
    const std::string k = std::string("_") + m + "_ms";
    EXPECT_GT(j["mean" + k].get<double>(), 0) << m;
    EXPECT_LE(j["median" + k].get<double>(), j["p99" + k].get<double>()) << m;
    EXPECT_LE(j["p90" + k].get<double>(), j["p99" + k].get<double>()) << m;
  }
  EXPECT_GE(j["mean_e2el_ms"].get<double>(), j["mean_ttft_ms"].get<double>());
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_GT(j["ttfts"][i].get<double>(), 0);
    EXPECT_LE(j["ttfts"][i].get<double>(), j["e2els"][i].get<double>());
    EXPECT_LE(j["itls"][i].size(), 7u);  // gaps between at most 8 text chunks
  }
}

TEST_F(BenchServe, RangeRatioAndPoissonArrivalsOnChat) {
  const std::string file = temp("chat.json");
  const CliRun r = run_cli("bench serve " + target() + " --endpoint /v1/chat/completions --num-prompts 6 "
                           "--random-input-len 16 --random-output-len 8 --random-range-ratio 0.5 "
                           "--request-rate 20 --ignore-eos --seed 2 --result-file " + file);
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = read_json(file);
  EXPECT_EQ(j["completed"], 6);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["request_rate"], 20.0);
  EXPECT_EQ(j["config"]["max_concurrency"], nullptr);
  EXPECT_EQ(sum(j["output_lens"]), j["total_output_tokens"].get<int64_t>());
  EXPECT_EQ(sum(j["input_lens"]), j["total_input_tokens"].get<int64_t>());
  for (const json& n : j["output_lens"]) {
    EXPECT_GE(n.get<int>(), 4);  // floor(8 * 0.5)
    EXPECT_LE(n.get<int>(), 12);
  }
  for (const json& n : j["input_lens"]) EXPECT_GT(n.get<int>(), 0);  // the chat template's tokens too
}

TEST_F(BenchServe, WithoutStreaming) {
  const std::string file = temp("plain.json");
  const CliRun r = run_cli("bench serve " + target() + " --num-prompts 4 --random-input-len 8 "
                           "--random-output-len 6 --ignore-eos --no-stream --result-file " + file);
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = read_json(file);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["total_output_tokens"], 4 * 6);
  EXPECT_EQ(j["config"]["stream"], false);
  EXPECT_EQ(j["mean_itl_ms"], 0.0);
  EXPECT_EQ(j["ttfts"], j["e2els"]);
}

TEST_F(BenchServe, ShareGptFile) {
  const std::string data = temp("sharegpt_data.json");
  const std::string reply_a(40, 'a'), reply_b(22, 'b');  // 10 and 6 tokens at 4 characters each
  const json conversations = json::array({
      {{"id", "a"}, {"conversations", {{{"from", "human"}, {"value", "Tell me about the kernel."}},
                                        {{"from", "gpt"}, {"value", reply_a}}}}},
      {{"id", "no-reply"}, {"conversations", {{{"from", "human"}, {"value", "Hello?"}}}}},
      {{"id", "b"}, {"conversations", {{{"from", "gpt"}, {"value", "Hi."}},
                                        {{"from", "human"}, {"value", "What is apt?"}},
                                        {{"from", "gpt"}, {"value", reply_b}}}}},
      {{"id", "broken"}, {"conversations", "not a list"}},
  });
  std::ofstream(data) << conversations.dump();
  const std::string file = temp("sharegpt.json");
  const CliRun r = run_cli("bench serve " + target() + " --dataset-name sharegpt --dataset-path " + data +
                           " --sharegpt-output-len 5 --num-prompts 3 --ignore-eos --result-file " + file);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("2 conversations for 3 prompts"), std::string::npos) << r.out;
  json j = read_json(file);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["total_output_tokens"], 15);
  for (const json& n : j["input_lens"]) EXPECT_GT(n.get<int>(), 0);

  // Without --sharegpt-output-len: the replies' characters / 4, on the chat endpoint.
  const CliRun c = run_cli("bench serve " + target() + " --endpoint /v1/chat/completions --dataset-name sharegpt "
                           "--dataset-path " + data + " --num-prompts 2 --ignore-eos --result-file " + file);
  ASSERT_EQ(c.status, 0) << c.out;
  j = read_json(file);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["total_output_tokens"], 10 + 6);
}

TEST_F(BenchServe, BurstOfRequestsAtOnceAllComplete) {
  // 256 requests at once (request rate inf, no --max-concurrency): one thread and one connection
  // each, all connecting together. httplib's listen backlog of 5 used to reset part of such a
  // burst ("the connection closed or failed before the whole response"); serve widens it.
  const std::string file = temp("burst.json");
  const CliRun r = run_cli("bench serve " + target() + " --num-prompts 256 --random-input-len 8 "
                           "--random-output-len 2 --ignore-eos --seed 3 --result-file " + file);
  ASSERT_EQ(r.status, 0) << r.out;
  const json j = read_json(file);
  std::string first_error;
  for (const json& e : j["errors"]) {
    if (!e.get<std::string>().empty()) {
      first_error = e.get<std::string>();
      break;
    }
  }
  EXPECT_EQ(j["failed"], 0) << "the first error: " << first_error;
  EXPECT_EQ(j["completed"], 256);
  EXPECT_EQ(j["total_output_tokens"], 256 * 2);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["config"]["max_concurrency"], nullptr);
}

TEST_F(BenchServe, BadInputIsAClearError) {
  struct Case {
    std::string args, message;
    int status;
  };
  const std::string data = temp("not_sharegpt.json");
  std::ofstream(data) << "{\"conversations\": []}";
  const std::vector<Case> cases = {
      {"--num-prompts 0", "--num-prompts must be positive", 1},
      {"--random-output-len -3", "--random-output-len must be positive", 1},
      {"--random-range-ratio 1", "--random-range-ratio must be in [0, 1)", 1},
      {"--request-rate fast", "--request-rate must be a positive number or inf", 1},
      {"--base-url ftp://127.0.0.1:1", "--base-url: expected http://HOST[:PORT][/PATH]", 1},
      {"--dataset-name sharegpt", "--dataset-name sharegpt needs --dataset-path FILE", 1},
      {"--dataset-name sharegpt --dataset-path /nonexistent/x.json", "cannot open '/nonexistent/x.json'", 1},
      {"--dataset-name sharegpt --dataset-path " + data, "must hold a JSON list", 1},
      {"--base-url http://127.0.0.1:" + std::to_string(closed_port()), "cannot reach the server", 1},
      {"--base-url http://127.0.0.1:" + std::to_string(port_) + " --api-key wrong", "HTTP 401", 1},
  };
  for (const Case& c : cases) {
    const CliRun r = run_cli("bench serve " + c.args);
    EXPECT_EQ(r.status, c.status) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
  }
  // CLI11's own errors: non-zero, naming the option.
  for (const std::string args : {"--dataset-name nope", "--endpoint /v1/embeddings", "--no-such-flag"}) {
    const CliRun r = run_cli("bench serve " + args);
    EXPECT_GT(r.status, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(args.substr(0, args.find(' '))), std::string::npos) << args << "\n" << r.out;
  }
}

TEST_F(BenchServe, FailedRequestsAreCountedNotFatal) {
  // Prompts longer than the context: every request is a 400, recorded with its message.
  const std::string file = temp("failed.json");
  const CliRun r = run_cli("bench serve " + target() + " --num-prompts 3 --random-input-len 20000 "
                           "--random-output-len 4 --result-file " + file);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("all 3 requests failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Failed requests:                         3"), std::string::npos) << r.out;
  const json j = read_json(file);
  EXPECT_EQ(j["completed"], 0);
  EXPECT_EQ(j["failed"], 3);
  for (const json& e : j["errors"]) EXPECT_NE(e.get<std::string>().find("HTTP 400"), std::string::npos) << e;

  // A per-request timeout far below one request's time fails those requests, not the tool.
  const CliRun t = run_cli("bench serve " + target() + " --num-prompts 2 --random-input-len 8 "
                           "--random-output-len 2000 --ignore-eos --timeout 0.05 --result-file " + file);
  EXPECT_EQ(t.status, 1) << t.out;
  EXPECT_NE(t.out.find("timed out after"), std::string::npos) << t.out;
}

}  // namespace
}  // namespace strata::testing
