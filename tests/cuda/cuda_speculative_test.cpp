// Speculative decoding on CUDA (engine_speculative.cpp) with the default model's MTP head, on the
// 32 prompts of default_model_prompts.json. The verify runs K + 1 tokens a sequence through the
// prefill kernels, and bf16 kernels are not batch-invariant, so greedy outputs with drafts may
// leave those without where the top two logits nearly tie: each output must equal the plain
// engine's up to its first divergence, and there the plain output's top-2 margin (recomputed
// by one forward over the prompt and the agreed tokens) must be below kTieMargin; most outputs
// must be equal in full. Also: the acceptance rate, the counters, max_tokens, stop ids, the host
// path of the acceptance (log-probabilities asked) against the device's arg max, graphs for
// steps without drafters, sampling, and structured outputs (drafts and verify rows masked).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "../engine/engine_test_util.h"
#include "../golden/golden_util.h"
#include "cuda_test_util.h"
#include "vocabulary_bytes.h"
#include "strata/engine/single_sequence.h"
#include "strata/engine/structured_output.h"
#include "strata/grammar/json_schema.h"
#include "strata/server/guided.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::testing {
namespace {

const std::string kDir = std::string(STRATA_SOURCE_DIR) + "/models/default";

// A near-tie: the logits' std on this model is about 16, and bf16 against fp32 moved a logit by
// at most 1.25 over 25M (docs/BENCHMARKS.md, "bf16 against fp32 greedy text"); two bf16 runs of
// different batch shapes differ by far less than that at a position.
constexpr float kTieMargin = 0.5f;

std::vector<std::vector<int32_t>> prompts() {
  const nlohmann::json j = read_json_file(std::string(STRATA_SOURCE_DIR) + "/tests/cuda/default_model_prompts.json");
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : j.at("prompts")) out.push_back(p.at("ids").get<std::vector<int32_t>>());
  return out;
}

std::shared_ptr<Model> gpu_mtp_model() {
  static std::shared_ptr<Model> m = [] {
    LoadOptions o;
    o.device = Device::kCuda;
    o.mtp = true;
    return std::shared_ptr<Model>(load_model(kDir, o));
  }();
  return m;
}

EngineConfig config(int k) {
  EngineConfig c;
  c.model = kDir;
  c.device = Device::kCuda;
  c.kv_cache_memory = size_t(512) << 20;
  c.max_num_seqs = 32;
  c.max_model_len = 512;
  c.log_capacity = false;
  if (k > 0) c.speculative = {"mtp", k};
  return c;
}

struct SpecRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

SpecRun generate(int k, const std::vector<std::vector<int32_t>>& ps, const SamplingParams& params) {
  Engine engine(gpu_mtp_model(), config(k), GenerationDefaults::load(kDir));
  SpecRun r;
  r.outputs = run_all(engine, ps, params);
  r.stats = engine.stats();
  EXPECT_EQ(r.stats.cache.page_refs, 0) << "pages left referenced, K = " << k;
  EXPECT_EQ(r.stats.cache.free_seq_slots, r.stats.cache.seq_slots) << "state slots left taken, K = " << k;
  return r;
}

// The top-2 margin of the logits after prompt + out[0, n) (one forward on the GPU model).
float margin_after(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out, size_t n) {
  std::vector<int32_t> ids = prompt;
  ids.insert(ids.end(), out.begin(), out.begin() + ptrdiff_t(n));
  const Tensor l = sequence_logits(*gpu_mtp_model(), ids, "full");
  const int64_t v = l.dim(1);
  const float* row = l.data<float>() + (l.dim(0) - 1) * v;
  std::vector<float> top(row, row + v);
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
  return top[0] - top[1];
}

// `got` equals `want` up to the first divergence, where `want`'s choice was a near-tie; true when
// equal in full. `got` may be shorter (a stop) and then is `want`'s prefix.
bool follows(const std::vector<int32_t>& prompt, const std::vector<int32_t>& want, const std::vector<int32_t>& got,
             const std::string& what) {
  const size_t n = std::min(want.size(), got.size());
  size_t d = 0;
  while (d < n && want[d] == got[d]) ++d;
  if (d == n) return want.size() == got.size();
  const float m = margin_after(prompt, want, d);
  EXPECT_LT(m, kTieMargin) << what << ": diverges at output token " << d << " (" << want[d] << " without drafts, "
                           << got[d] << " with) where the top-2 margin is " << m;
  return false;
}

TEST(CudaSpeculative, GreedyFollowsThePlainEngineAtK1To3) {
  STRATA_REQUIRE_GPU();
  ASSERT_TRUE(std::filesystem::exists(kDir + "/model.safetensors")) << kDir << "/model.safetensors is missing";
  const auto ps = prompts();
  const SamplingParams params = greedy_params(64);
  const SpecRun plain = generate(0, ps, params);
  EXPECT_EQ(plain.stats.spec_verifies, 0);
  EXPECT_GT(plain.stats.graph_steps, 0) << "the plain engine's decode steps should replay graphs";
  for (int k = 1; k <= 3; ++k) {
    const SpecRun spec = generate(k, ps, params);
    int whole = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      const CompletionOutput& g = spec.outputs[i].outputs.at(0);
      ASSERT_EQ(g.token_ids.size(), 64u) << "max_tokens, K = " << k << ", prompt " << i;
      EXPECT_EQ(g.finish_reason, "length");
      whole += follows(ps[i], plain.outputs[i].outputs.at(0).token_ids, g.token_ids,
                       "K = " + std::to_string(k) + ", prompt " + std::to_string(i));
    }
    const EngineStats& s = spec.stats;
    std::printf("CUDA speculation K=%d: %d of %zu outputs equal in full; %lld verifies, %lld drafted, %lld accepted "
                "(rate %.3f, mean acceptance length %.2f), %lld rollbacks (%lld replays), %lld steps against %lld "
                "without, %lld graph steps, %lld of %lld head forwards as graphs, %lld steps chained\n",
                k, whole, ps.size(), (long long)s.spec_verifies, (long long)s.spec_draft_tokens,
                (long long)s.spec_accepted_tokens, s.spec_acceptance_rate(), s.spec_mean_acceptance_length(),
                (long long)s.spec_rollbacks, (long long)s.spec_replays, (long long)s.steps, (long long)plain.stats.steps,
                (long long)s.graph_steps, (long long)s.spec_draft_graphs, (long long)s.spec_draft_forwards,
                (long long)s.spec_chain_steps);
    EXPECT_GT(s.spec_draft_graphs, 0) << "K = " << k << ": no head forward replayed a graph";
    EXPECT_GT(s.spec_chain_steps, 0) << "K = " << k << ": no step took the draft chain";
    EXPECT_GE(whole, int(ps.size()) / 2) << "K = " << k << ": most outputs should be equal in full";
    EXPECT_GT(s.spec_verifies, 0);
    EXPECT_GT(s.spec_rollbacks, 0) << "no rejection was rolled back: the rollback is untested";
    EXPECT_LT(s.steps, plain.stats.steps) << "speculation did not save target forwards";
    if (k == 1) EXPECT_GT(s.spec_acceptance_rate(), 0.5) << "the CPU measured 0.92 at K = 1";
    ASSERT_EQ(s.spec_accepted_at.size(), size_t(k));
    int64_t sum = 0;
    for (int i = 0; i < k; ++i) {
      EXPECT_LE(s.spec_accepted_at[size_t(i)], s.spec_drafted_at[size_t(i)]);
      sum += s.spec_accepted_at[size_t(i)];
    }
    EXPECT_EQ(sum, s.spec_accepted_tokens);
    // Position i's draft is verified only when drafts 0..i-1 were accepted: the histogram counts
    // the drafts reached, so it sums to at most the drafts made.
    int64_t reached = 0;
    for (int i = 0; i < k; ++i) {
      if (i > 0) EXPECT_LE(s.spec_drafted_at[size_t(i)], s.spec_accepted_at[size_t(i) - 1]) << "position " << i;
      reached += s.spec_drafted_at[size_t(i)];
    }
    EXPECT_LE(s.spec_drafted_at[0], s.spec_verifies);
    EXPECT_LE(reached, s.spec_draft_tokens);
    if (k == 1) EXPECT_EQ(reached, s.spec_draft_tokens);
  }
}

// Dynamic K where speculation never pays (a verify row costs a thousand decode steps): only probes
// draft, and the steps between defer the head (Sequence::head_pending); a sequence whose kept
// rows fill up between probes has them caught up at a step's launch (a head graph queued behind
// the forward), so those steps overlap the next as plain decoding's do. Outputs follow the plain
// engine's, and the probes' drafts are as good as with the head run every step (head_defer_max
// 0): a head KV left stale or written at the wrong positions would cut their acceptance (on the
// CPU, 10 of 37 against 19 of 45).
TEST(CudaSpeculative, DynamicKDefersAndCatchesUpTheHead) {
  STRATA_REQUIRE_GPU();
  const auto ps = prompts();
  const SamplingParams params = greedy_params(64);
  const SpecRun plain = generate(0, ps, params);
  const auto run_dynamic = [&](int defer_max) {
    EngineConfig c = config(3);
    c.speculative.dynamic = true;
    c.speculative.measure_costs = false;
    c.speculative.costs.verify_row = 1000;  // (a verify here stores per-token states: no replay to charge)
    c.speculative.head_defer_max = defer_max;
    Engine engine(gpu_mtp_model(), c, GenerationDefaults::load(kDir));
    SpecRun r;
    r.outputs = run_all(engine, ps, params);
    r.stats = engine.stats();
    EXPECT_EQ(r.stats.cache.page_refs, 0) << "pages left referenced, head_defer_max " << defer_max;
    return r;
  };
  const SpecRun deferred = run_dynamic(15), every_step = run_dynamic(0);
  for (const SpecRun* run : {&deferred, &every_step}) {
    int whole = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      whole += follows(ps[i], plain.outputs[i].outputs.at(0).token_ids, run->outputs[i].outputs.at(0).token_ids,
                       "dynamic K, prompt " + std::to_string(i));
    }
    const EngineStats& s = run->stats;
    std::printf("CUDA dynamic K, head %s: %d of %zu outputs equal in full; %lld verifies, %lld drafted, %lld accepted "
                "(rate %.3f); %lld head forwards (%lld as graphs), %lld head KV catch-ups at launch, %lld positions deferred; "
                "%lld of %lld steps overlapped (without speculation %lld of %lld)\n",
                run == &deferred ? "deferred" : "every step", whole, ps.size(), (long long)s.spec_verifies,
                (long long)s.spec_draft_tokens, (long long)s.spec_accepted_tokens, s.spec_acceptance_rate(),
                (long long)s.spec_draft_forwards, (long long)s.spec_draft_graphs, (long long)s.spec_head_launch_catch_ups,
                (long long)s.spec_head_deferred, (long long)s.overlapped_steps, (long long)s.steps,
                (long long)plain.stats.overlapped_steps, (long long)plain.stats.steps);
    EXPECT_GE(whole, int(ps.size()) / 2) << "most outputs should be equal in full";
    EXPECT_GE(s.spec_draft_tokens, 32) << "too few probes to compare";
  }
  EXPECT_GT(deferred.stats.spec_head_launch_catch_ups, 0) << "no kept rows filled up between probes";
  EXPECT_EQ(every_step.stats.spec_head_launch_catch_ups, 0);
  EXPECT_GE(deferred.stats.spec_acceptance_rate(), 0.8 * every_step.stats.spec_acceptance_rate())
      << "the probes' drafts after deferred and caught-up head forwards are worse than the head's every step";
  EXPECT_GE(deferred.stats.overlapped_steps * 10, plain.stats.overlapped_steps * 8)
      << "dynamic K's steps without drafts did not overlap as plain decoding's";
}

// Log-probabilities send the verify rows to the host's Sampler and the drafts to the host path
// (engine_speculative.cpp) instead of the draft chain on the device (engine_spec_chain.cpp): the
// same picks, and each token has its log-probability. The chain's head runs K + 1 rows at depth 1
// where the host path runs the accepted ones, so in bf16 a draft may differ and with it the
// batches that follow: outputs follow each other up to near-ties.
TEST(CudaSpeculative, HostAcceptanceEqualsTheDevicesArgMax) {
  STRATA_REQUIRE_GPU();
  const auto ps = prompts();
  const SpecRun device = generate(2, ps, greedy_params(32));
  const SpecRun host = generate(2, ps, greedy_params(32, 1));
  int whole = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    const CompletionOutput& d = device.outputs[i].outputs.at(0);
    const CompletionOutput& h = host.outputs[i].outputs.at(0);
    whole += follows(ps[i], h.token_ids, d.token_ids, "prompt " + std::to_string(i));
    EXPECT_EQ(h.logprobs.size(), h.token_ids.size()) << "prompt " << i;
    for (float lp : h.logprobs) EXPECT_LE(lp, 0.f);
  }
  std::printf("draft chain against the host path, K = 2: %d of %zu outputs equal in full; accepted %lld against %lld; "
              "%lld of %lld steps chained\n", whole, ps.size(), (long long)device.stats.spec_accepted_tokens,
              (long long)host.stats.spec_accepted_tokens, (long long)device.stats.spec_chain_steps,
              (long long)device.stats.steps);
  EXPECT_GE(whole, int(ps.size()) * 3 / 4);
  EXPECT_GT(device.stats.spec_chain_steps, 0) << "the greedy run never took the draft chain";
  EXPECT_EQ(host.stats.spec_chain_steps, 0) << "log-probabilities are the host's";
}

// A stop id ends the output where it is first emitted, even inside an accepted run of drafts.
TEST(CudaSpeculative, StopIdsAndMaxTokensAreRespected) {
  STRATA_REQUIRE_GPU();
  const auto ps = prompts();
  for (size_t i = 0; i < 4; ++i) {
    const std::vector<std::vector<int32_t>> one{ps[i]};
    const std::vector<int32_t> full = generate(3, one, greedy_params(48)).outputs[0].outputs.at(0).token_ids;
    ASSERT_EQ(full.size(), 48u);
    SamplingParams stop = greedy_params(48);
    stop.stop_token_ids = {full[20]};
    const CompletionOutput got = generate(3, one, stop).outputs[0].outputs.at(0);
    const size_t first = size_t(std::find(full.begin(), full.end(), full[20]) - full.begin());
    ASSERT_FALSE(got.token_ids.empty());
    EXPECT_EQ(got.finish_reason, "stop") << "prompt " << i;
    EXPECT_EQ(got.token_ids.back(), full[20]) << "prompt " << i;
    EXPECT_EQ(std::count(got.token_ids.begin(), got.token_ids.end(), full[20]), 1) << "prompt " << i;
    EXPECT_LE(got.token_ids.size(), first + 1) << "prompt " << i;
    std::vector<int32_t> want(full.begin(), full.begin() + ptrdiff_t(first + 1));
    follows(ps[i], want, got.token_ids, "stop id, prompt " + std::to_string(i));
    for (int max_tokens : {1, 2, 5}) {
      const CompletionOutput m = generate(3, one, greedy_params(max_tokens)).outputs[0].outputs.at(0);
      EXPECT_EQ(m.token_ids.size(), size_t(max_tokens)) << "prompt " << i;
      EXPECT_EQ(m.finish_reason, "length");
    }
  }
}

// Multi-completion requests never draft: their steps run forward() and replay decode graphs.
TEST(CudaSpeculative, MultiCompletionStepsKeepTheirGraphs) {
  STRATA_REQUIRE_GPU();
  const auto all = prompts();
  const std::vector<std::vector<int32_t>> ps(all.begin(), all.begin() + 8);
  SamplingParams p = greedy_params(32);
  p.n = 2;
  const SpecRun plain = generate(0, ps, p), spec = generate(2, ps, p);
  EXPECT_EQ(spec.stats.spec_verifies, 0);
  EXPECT_GT(spec.stats.graph_steps, 0) << "decode steps without drafters should replay graphs";
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(spec.outputs[i].outputs.size(), 2u);
    for (size_t j = 0; j < 2; ++j) {
      const std::vector<int32_t>& got = spec.outputs[i].outputs[j].token_ids;
      EXPECT_EQ(got.size(), 32u);
      follows(ps[i], plain.outputs[i].outputs.at(j).token_ids, got, "n = 2, prompt " + std::to_string(i));
    }
  }
}

TEST(CudaSpeculative, SampledRunsFinishWithTheirLengths) {
  STRATA_REQUIRE_GPU();
  const auto ps = prompts();
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 7;
  p.max_tokens = 40;
  p.ignore_eos = true;
  const SpecRun r = generate(2, ps, p);
  for (size_t i = 0; i < ps.size(); ++i) {
    const CompletionOutput& c = r.outputs[i].outputs.at(0);
    EXPECT_EQ(c.token_ids.size(), 40u) << "prompt " << i;
    EXPECT_EQ(c.finish_reason, "length");
    for (int32_t t : c.token_ids) EXPECT_TRUE(t >= 0 && t < gpu_mtp_model()->info().vocab_size);
  }
  EXPECT_GT(r.stats.spec_verifies, 0);
  EXPECT_GT(r.stats.spec_accepted_tokens, 0);
  std::printf("CUDA speculation sampled K=2: acceptance rate %.3f\n", r.stats.spec_acceptance_rate());
}

// Structured outputs with drafts: the masked verify rows come back whole for the host Sampler
// and the greedy drafts are the masked arg max of whole head rows; every output, greedy and
// sampled, is its grammar's whole sentence and ends with "stop".
TEST(CudaSpeculative, StructuredOutputsStayInTheirGrammars) {
  STRATA_REQUIRE_GPU();
  std::vector<int32_t> eos;
  for (int64_t e : gpu_mtp_model()->info().eos_token_ids) eos.push_back(int32_t(e));
  for (int64_t e : GenerationDefaults::load(kDir).eos_token_ids) eos.push_back(int32_t(e));
  auto vocab = std::make_shared<const grammar::TokenVocabulary>(vocabulary_bytes(kDir), eos);
  const std::vector<std::shared_ptr<const StructuredOutput>> constraints = {
      StructuredOutput::make(grammar::from_json_schema(
          R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"ok":{"type":"boolean"},)"
          R"("size":{"enum":[1,2,3]}},"required":["name","ok","size"],"additionalProperties":false})"), vocab),
      StructuredOutput::make(grammar::from_regex("(red|green|blue)-[0-9]{2}"), vocab),
      StructuredOutput::make(server::choice_grammar({"yes", "no", "maybe later", "not sure"}), vocab),
  };
  auto ps = prompts();
  ps.resize(std::min<size_t>(ps.size(), 8));
  int64_t accepted = 0;
  for (size_t ci = 0; ci < constraints.size(); ++ci) {
    for (double t : {0.0, 1.0}) {
      SamplingParams p;
      p.temperature = t;
      p.seed = 3;
      p.max_tokens = 300;
      p.structured = constraints[ci];
      const SpecRun r = generate(3, ps, p);
      EXPECT_GT(r.stats.spec_verifies, 0);
      accepted += r.stats.spec_accepted_tokens;
      for (size_t i = 0; i < ps.size(); ++i) {
        const CompletionOutput& c = r.outputs[i].outputs.at(0);
        std::string text;
        for (int32_t id : c.token_ids) {
          if (!constraints[ci]->is_end(id)) text += vocab->bytes(id);
        }
        const std::string what = "constraint " + std::to_string(ci) + ", t " + std::to_string(t) + ", prompt " +
                                 std::to_string(i) + ": " + text;
        grammar::GrammarMatcher m(constraints[ci]->grammar);
        EXPECT_TRUE(m.accept_token(text) && m.can_end()) << what;
        EXPECT_EQ(c.finish_reason, "stop") << what;
      }
    }
  }
  EXPECT_GT(accepted, 0) << "no draft under a grammar was accepted";
}

}  // namespace
}  // namespace strata::testing
