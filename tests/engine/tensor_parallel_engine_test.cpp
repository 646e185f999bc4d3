// The engine over a tensor-parallel model (models/parallel_model.h): one scheduler on rank 0,
// the ranks on LocalGroup threads. The same workload (concurrent sequences, chunked prefill,
// forks that copy a partly filled page and the state, prefix-cache hits that restore state
// snapshots) must give the same tokens as one rank, and logprobs within float rounding: a
// snapshot or fork copy that missed a rank's caches would show as different tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine_test_util.h"
#include "strata/models/parallel_model.h"
#include "tensor_parallel_util.h"

namespace strata::testing {
namespace {

struct Workload {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

// Round 1: six prompts at once, four of them sharing a 100-token prefix, plus one request of
// three sampled completions (forked from its prompt: a partly filled page and the state copied).
// Round 2: three prompts continuing round 1's shared prefix, served from its pages and snapshots.
Workload run_workload(Engine& engine, int64_t vocab) {
  std::mt19937_64 rng(61);
  const std::vector<int32_t> shared = random_ids(rng, 100, vocab);
  auto with_shared = [&](int extra) {
    std::vector<int32_t> p = shared;
    for (int32_t id : random_ids(rng, extra, vocab)) p.push_back(id);
    return p;
  };
  Workload w;
  const std::vector<std::vector<int32_t>> round1 = {with_shared(7),          with_shared(30), random_ids(rng, 45, vocab),
                                                    with_shared(19),         random_ids(rng, 9, vocab),
                                                    with_shared(52)};
  for (RequestOutput& o : run_all(engine, round1, greedy_params(8, 1), "a")) w.outputs.push_back(std::move(o));
  SamplingParams sampled;
  sampled.temperature = 1.0;
  sampled.seed = 5;
  sampled.n = 3;
  sampled.max_tokens = 10;
  sampled.ignore_eos = true;
  sampled.logprobs = 1;
  for (RequestOutput& o : run_all(engine, {random_ids(rng, 53, vocab)}, sampled, "f")) w.outputs.push_back(std::move(o));
  const std::vector<std::vector<int32_t>> round2 = {with_shared(11), with_shared(40), with_shared(3)};
  for (RequestOutput& o : run_all(engine, round2, greedy_params(8, 1), "b")) w.outputs.push_back(std::move(o));
  w.stats = engine.stats();
  return w;
}

EngineConfig parallel_config(const std::string& dir, int tp, bool ep) {
  EngineConfig c;
  c.model = dir;
  c.kv_cache_memory = size_t(16) << 20;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 64;  // chunked prefills mixed with decodes
  c.max_model_len = 512;
  c.prefix_state_interval = 2;    // a state snapshot every 32 tokens of prefill
  c.log_capacity = false;
  c.tensor_parallel_size = tp;
  c.enable_expert_parallel = ep;
  return c;
}

// Same tokens as one rank; the largest logprob difference.
double compare(const Workload& tp, const Workload& one, const std::string& what) {
  double worst = 0;
  EXPECT_EQ(tp.outputs.size(), one.outputs.size()) << what;
  for (size_t i = 0; i < std::min(tp.outputs.size(), one.outputs.size()); ++i) {
    const RequestOutput &a = tp.outputs[i], &b = one.outputs[i];
    EXPECT_EQ(a.metrics.num_cached_tokens, b.metrics.num_cached_tokens) << what << " request " << i;
    EXPECT_EQ(a.outputs.size(), b.outputs.size()) << what << " request " << i;
    for (size_t j = 0; j < std::min(a.outputs.size(), b.outputs.size()); ++j) {
      EXPECT_EQ(a.outputs[j].token_ids, b.outputs[j].token_ids) << what << " request " << i << " completion " << j;
      EXPECT_EQ(a.outputs[j].logprobs.size(), b.outputs[j].logprobs.size()) << what;
      for (size_t t = 0; t < std::min(a.outputs[j].logprobs.size(), b.outputs[j].logprobs.size()); ++t) {
        worst = std::max(worst, double(std::fabs(a.outputs[j].logprobs[t] - b.outputs[j].logprobs[t])));
      }
    }
  }
  return worst;
}

void expect_engine_matches_one_rank(const std::string& dir, const std::string& name, int tp, bool ep) {
  Engine one(parallel_config(dir, 1, false));
  const int64_t vocab = one.model_info().vocab_size;
  const Workload ref = run_workload(one, vocab);
  Engine sharded(parallel_config(dir, tp, ep));
  const Workload got = run_workload(sharded, vocab);
  const std::string what = cat(name, " TP=", tp, ep ? " EP" : "");
  // The workload exercised what it is meant to.
  EXPECT_GT(got.stats.prefix_hits, 0) << what;
  EXPECT_GT(got.stats.snapshots_restored, 0) << what;
  EXPECT_GT(got.stats.forks, 0) << what;
  EXPECT_GT(got.stats.cache.snapshots, 0) << what;
  const double d = compare(got, ref, what);
  std::printf("  %s: %zu requests, %lld prefix-hit tokens, %lld snapshots restored, %lld forks; "
              "max |d logprob| vs TP=1 = %.3g\n",
              what.c_str(), got.outputs.size(), (long long)got.stats.prefix_hits,
              (long long)got.stats.snapshots_restored, (long long)got.stats.forks, d);
  EXPECT_LE(d, 1e-4) << what;
  expect_no_leak(sharded);
}

TEST(EngineTensorParallel, TwoRanksGenerateAsOne) {
  for (const std::string name : {"qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny"}) {
    for (bool ep : {false, true}) {
      if (ep && name == "qwen3_5_tiny") continue;  // dense
      expect_engine_matches_one_rank(engine_fixture_dir(name), name, 2, ep);
    }
  }
}

TEST(EngineTensorParallel, DeepseekV4GeneratesAsOne) {
  // Replicated attention and compressor rings (slot state), split indexer and experts.
  for (bool ep : {false, true}) {
    expect_engine_matches_one_rank(engine_fixture_dir("deepseek_v4_tiny"), "deepseek_v4_tiny", 2, ep);
  }
  expect_engine_matches_one_rank(engine_fixture_dir("deepseek_v4_quant"), "deepseek_v4_quant", 4, false);
}

TEST(EngineTensorParallel, Qwen4ExpGeneratesAsOne) {
  // Split GDN, attention and indexer heads, replicated hyper-connection and PLE state (the n-gram
  // context and PLE conv slots), the indexer's block-key pages and tail slot on every rank.
  for (bool ep : {false, true}) {
    expect_engine_matches_one_rank(engine_fixture_dir("qwen4_exp_tiny"), "qwen4_exp_tiny", 2, ep);
  }
  const WidenedModel wide("qwen4_exp_tiny", 4, 8);
  for (bool ep : {false, true}) expect_engine_matches_one_rank(wide.dir, "widened qwen4_exp_tiny", 4, ep);
}

TEST(EngineTensorParallel, FourRanksGenerateAsOneOnAWiderModel) {
  const WidenedModel wide;
  for (bool ep : {false, true}) expect_engine_matches_one_rank(wide.dir, "widened qwen3_5_moe_tiny", 4, ep);
}

TEST(EngineTensorParallel, MisuseIsRefusedByName) {
  const std::string dir = engine_fixture_dir("qwen3_5_tiny");
  auto error_of = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  LoadOptions on_cuda;
  on_cuda.device = Device::kCuda;
  const std::string cuda = error_of([&] { load_parallel_model(dir, on_cuda, {2, false}); });
  EXPECT_NE(cuda.find("--tensor-parallel-size 2"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("--device cpu only"), std::string::npos) << cuda;
  const std::string zero = error_of([&] { load_parallel_model(dir, LoadOptions{}, {0, false}); });
  EXPECT_NE(zero.find("--tensor-parallel-size must be >= 1"), std::string::npos) << zero;
  // Pools without the other ranks' (Caches::allocate) are refused before any rank runs.
  auto model = load_parallel_model(dir, LoadOptions{}, {2, false});
  Caches bare = Caches::allocate(model->info().cache, 4, 16, 1, Device::kCpu);
  ForwardBatch batch;
  batch.token_ids = {5, 6};
  batch.positions = {0, 1};
  SeqInBatch s;
  s.q_len = 2;
  s.block_table = {0};
  s.state_slot = 0;
  batch.seqs.push_back(s);
  batch.logit_rows = {1};
  Tensor logits;
  const std::string peers = error_of([&] { model->forward(batch, bare, logits); });
  EXPECT_NE(peers.find("caches for 1 ranks, the model has 2"), std::string::npos) << peers;
  // With its own pools the same batch runs, and gives the one-rank logits.
  Caches pools = model->allocate_caches(4, 16, 1);
  ASSERT_EQ(pools.peers.size(), 1u);
  model->forward(batch, pools, logits);
  auto single = load_model(dir);
  Caches single_pools = single->allocate_caches(4, 16, 1);
  Tensor ref;
  single->forward(batch, single_pools, ref);
  EXPECT_LE(max_abs_diff(logits, ref), 1e-4);
}

}  // namespace
}  // namespace strata::testing
