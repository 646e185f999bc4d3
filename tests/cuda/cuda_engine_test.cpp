// The engine on the CUDA backend: the same requests through engine steps with CUDA-graph decode
// and with --enforce-eager give the same tokens and logprobs bit for bit (several sequences at
// once, chunked prefill, prefix-cache hits on a second round), and the tokens equal the CPU
// engine's at every step whose CPU top-2 logprob margin is well above bf16's error; Qwen4-Exp
// (no graphs: its n-gram gather syncs with the host) runs through the engine eagerly.
#include <cstdio>

#include "../engine/engine_test_util.h"
#include "../golden/golden_util.h"
#include "cuda_test_util.h"

namespace strata::testing {
namespace {

struct EngineRun {
  std::vector<RequestOutput> first, second;  // the second round re-sends the prompts
  EngineStats stats;
};

EngineRun run_engine(const std::string& fixture, const std::shared_ptr<Model>& model, bool enforce_eager,
                     KvCacheDtype kv = KvCacheDtype::kAuto) {
  EngineConfig c = test_config(fixture);
  c.enforce_eager = enforce_eager;
  c.kv_cache_dtype = kv;
  c.max_num_batched_tokens = 64;  // the 70-token prompt prefills in chunks
  Engine engine(model, c, GenerationDefaults::load(engine_fixture_dir(fixture)));
  std::mt19937_64 rng(7);
  const int64_t vocab = model->info().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {random_ids(rng, 5, vocab), random_ids(rng, 70, vocab),
                                               random_ids(rng, 33, vocab)};
  const SamplingParams p = greedy_params(12, 2);
  EngineRun r;
  r.first = run_all(engine, prompts, p, "a");
  r.second = run_all(engine, prompts, p, "b");
  r.stats = engine.stats();
  return r;
}

std::shared_ptr<Model> cuda_model(const std::string& fixture, KvCacheDtype kv = KvCacheDtype::kAuto) {
  LoadOptions o;
  o.device = Device::kCuda;
  o.kv_cache_dtype = kv;
  return std::shared_ptr<Model>(load_model(engine_fixture_dir(fixture), o));
}

void expect_same(const std::vector<RequestOutput>& a, const std::vector<RequestOutput>& b, const std::string& at) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].outputs.size(), 1u);
    EXPECT_EQ(a[i].outputs[0].token_ids, b[i].outputs[0].token_ids) << at << ", request " << i;
    EXPECT_EQ(a[i].outputs[0].logprobs, b[i].outputs[0].logprobs) << at << ", request " << i;
  }
}

// Steps compared: the CUDA tokens must equal the CPU's while the CPU's top-2 margin exceeds
// `margin`; a request stops being compared at its first low-margin step.
int compare_with_cpu(const std::vector<RequestOutput>& gpu, const std::vector<RequestOutput>& cpu, float margin,
                     const std::string& at) {
  int compared = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const CompletionOutput &g = gpu[i].outputs[0], &c = cpu[i].outputs[0];
    for (size_t s = 0; s < c.token_ids.size(); ++s) {
      const auto& top = c.top_logprobs[s];
      if (top.size() < 2 || top[0].logprob - top[1].logprob <= margin) break;
      if (s >= g.token_ids.size()) {
        ADD_FAILURE() << at << ", request " << i << ": " << g.token_ids.size() << " tokens";
        break;
      }
      EXPECT_EQ(g.token_ids[s], c.token_ids[s]) << at << ", request " << i << " step " << s;
      ++compared;
    }
  }
  return compared;
}

// The same requests with CUDA-graph decode and eagerly give the same tokens and logprobs, and
// the CPU engine's tokens at the clear-margin steps; with the KV cache `kv` on both devices.
void check_graphs_eager_cpu(const std::string& fixture, KvCacheDtype kv) {
  const std::shared_ptr<Model> model = cuda_model(fixture, kv);
  const EngineRun graphs = run_engine(fixture, model, false, kv);
  const EngineRun eager = run_engine(fixture, model, true, kv);
  const bool graphed = model->info().cuda_graphs;
  if (graphed) {
    EXPECT_GT(graphs.stats.graph_steps, 0) << fixture << ": no decode step ran as a graph";
  } else {
    EXPECT_EQ(graphs.stats.graph_steps, 0) << fixture;
  }
  EXPECT_EQ(eager.stats.graph_steps, 0);
  EXPECT_GT(graphs.stats.prefix_hits, 0) << fixture << ": the second round should hit the prefix cache";
  expect_same(graphs.first, eager.first, fixture + " graphs vs eager");
  expect_same(graphs.second, eager.second, fixture + " graphs vs eager, second round");
  const EngineRun cpu = run_engine(fixture, fixture_model(fixture, DType::kF32, kv), true, kv);
  // 2 x the goldens' per-position bf16 error bound: 0.1 x the scale of HF's logits.
  const float margin = float(2 * 0.1 * reference_scale(load_fixture(fixture).logits));
  const int compared = compare_with_cpu(graphs.first, cpu.first, margin, fixture) +
                       compare_with_cpu(graphs.second, cpu.second, margin, fixture + ", prefix-cached round");
  EXPECT_GT(compared, 0) << fixture << ": no step had a CPU top-2 margin above " << margin;
  std::printf("  cuda engine %s: %lld of %lld steps as graphs, prefix hits %lld, %d steps with a CPU top-2 "
              "margin above %.3g compared with the CPU\n",
              fixture.c_str(), (long long)graphs.stats.graph_steps, (long long)graphs.stats.steps,
              (long long)graphs.stats.prefix_hits, compared, margin);
}

class CudaEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngine, GraphDecodeEqualsEagerAndTheCpuEngine) {
  STRATA_REQUIRE_GPU();
  check_graphs_eager_cpu(GetParam(), KvCacheDtype::kAuto);
}

// The FP8 KV cache (--kv-cache-dtype fp8): its write kernel and FP8 decode captured in the graphs,
// the prefill over decoded pages, prefix hits reading FP8 pages.
TEST(CudaEngineFp8Kv, GraphDecodeEqualsEagerAndTheCpuEngine) {
  STRATA_REQUIRE_GPU();
  for (const char* fixture : {"qwen3_5_moe_tiny", "qwen3_next_tiny"}) check_graphs_eager_cpu(fixture, KvCacheDtype::kFp8E4M3);
}

// The decode graphs are captured at start-up on padding sequences (no context) and replayed by a
// short request, then by a long one at a context of 1,000 tokens. The decode attention must
// split the keys as the eager forward does at that length (the splits a sequence uses are read
// from its length on the device, not baked in at capture): the tokens and logprobs of the two
// engines equal bit for bit.
TEST(CudaEngineGraphs, LongContextDecodeReplaysAShortContextCapture) {
  STRATA_REQUIRE_GPU();
  const std::string fixture = "qwen3_5_tiny";
  const std::shared_ptr<Model> model = cuda_model(fixture);
  std::mt19937_64 rng(11);
  const int64_t vocab = model->info().vocab_size;
  const std::vector<int32_t> short_prompt = random_ids(rng, 6, vocab), long_prompt = random_ids(rng, 1000, vocab);
  std::vector<RequestOutput> outs[2];
  EngineStats stats[2];
  for (int eager = 0; eager < 2; ++eager) {
    EngineConfig c = test_config(fixture);
    c.enforce_eager = eager == 1;
    Engine engine(model, c, GenerationDefaults::load(engine_fixture_dir(fixture)));
    (void)run_all(engine, {short_prompt}, greedy_params(4, 2), "s");
    outs[eager] = run_all(engine, {long_prompt}, greedy_params(12, 2), "l");
    stats[eager] = engine.stats();
  }
  EXPECT_GT(stats[0].graph_steps, 12) << "the long request's decode steps should replay the graph";
  EXPECT_EQ(stats[1].graph_steps, 0);
  expect_same(outs[0], outs[1], "long context, graphs vs eager");
}

// Overlapped scheduling on the device: the tokens of step N-1 reach step N's batch through the
// feed kernel, never through the host. With no early stops the two modes schedule the same
// batches, so tokens and logprobs must be equal bit for bit.
TEST(CudaEngineAsync, OverlappedStepsEqualSerialSteps) {
  STRATA_REQUIRE_GPU();
  const std::string fixture = "qwen3_5_moe_tiny";
  const std::shared_ptr<Model> model = cuda_model(fixture);
  std::mt19937_64 rng(8);
  const int64_t vocab = model->info().vocab_size;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(random_ids(rng, 3 + int(rng() % 80), vocab));
    SamplingParams p = greedy_params(4 + int(rng() % 30), 2);
    if (i % 3 == 1) {
      p.temperature = 0.9;
      p.top_k = 30;
      p.top_p = 0.9;
      p.seed = uint64_t(i);
    }
    if (i % 4 == 2) p.n = 2;
    params.push_back(p);
  }
  std::vector<std::vector<RequestOutput>> outs(2);
  std::vector<EngineStats> stats(2);
  for (int async = 0; async < 2; ++async) {
    EngineConfig c = test_config(fixture);
    c.async_scheduling = async == 1;
    c.max_num_batched_tokens = 64;
    Engine engine(model, c, GenerationDefaults::load(engine_fixture_dir(fixture)));
    outs[size_t(async)].resize(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(cat("r", i), prompts[i], params[i]);
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(outs[size_t(async)][std::stoul(d.request_id.substr(1))], d);
    }
    stats[size_t(async)] = engine.stats();
    expect_no_leak(engine);
  }
  for (size_t i = 0; i < prompts.size(); ++i) expect_same_outputs(outs[0][i], outs[1][i], cat("request ", i));
  EXPECT_EQ(stats[0].overlapped_steps, 0);
  EXPECT_GE(stats[1].overlapped_steps, stats[1].steps * 9 / 10);
  EXPECT_GT(stats[1].graph_steps, 0);
  std::printf("  async on CUDA: %lld steps, %lld overlapped, %lld as graphs\n", (long long)stats[1].steps,
              (long long)stats[1].overlapped_steps, (long long)stats[1].graph_steps);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEngine,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny", "qwen4_exp_tiny"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace strata::testing
