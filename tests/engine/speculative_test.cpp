// Speculative decoding with the default model's MTP head (engine_speculative.cpp): greedy
// outputs with drafts are the outputs without, token for token and logprob for logprob, under
// continuous batching, chunked prefill, prefix-cache hits (with state snapshots at every page),
// preemption, max_tokens, stop strings and EOS; the head's drafts are accepted often enough to
// matter, and rejections (rolled back by checkpoint and replay) happen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/engine/detokenizer.h"
#include "strata/engine/engine.h"
#include "strata/engine/llm.h"
#include "strata/engine/speculative_config.h"
#include "strata/models/model.h"
#include "strata/server/engine_loop.h"
#include "strata/server/metrics.h"
#include "strata/tokenizer/tokenizer.h"

#include "engine_test_util.h"

namespace strata::testing {
namespace {

struct SpecRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

// The prompts go in two waves; the second repeats and extends the first's (prefix hits).
SpecRun run(const EngineConfig& config, const std::vector<std::vector<int32_t>>& prompts,
        const std::vector<SamplingParams>& params) {
  Engine engine(default_mtp_model(), config, GenerationDefaults::load(default_model_dir()));
  engine.set_detokenizer(std::make_shared<TokenizerDetokenizer>(default_tokenizer()));
  SpecRun r;
  r.outputs.resize(prompts.size());
  const size_t half = prompts.size() / 2;
  for (size_t wave = 0; wave < 2; ++wave) {
    for (size_t i = wave ? half : 0; i < (wave ? prompts.size() : half); ++i) {
      engine.add_request("r" + std::to_string(i), prompts[i], params[i]);
    }
    while (engine.has_unfinished()) {
      for (const RequestOutput& d : engine.step()) accumulate_output(r.outputs[std::stoul(d.request_id.substr(1))], d);
    }
  }
  r.stats = engine.stats();
  EXPECT_EQ(r.stats.cache.page_refs, 0) << "pages left referenced";
  EXPECT_EQ(r.stats.cache.free_seq_slots, r.stats.cache.seq_slots) << "state slots left taken";
  return r;
}

void expect_same(const SpecRun& want, const SpecRun& got, const std::string& what) {
  ASSERT_EQ(want.outputs.size(), got.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    EXPECT_EQ(want.outputs[i].prompt_logprobs, got.outputs[i].prompt_logprobs) << what << ", prompt " << i;
    ASSERT_EQ(want.outputs[i].outputs.size(), got.outputs[i].outputs.size());
    for (size_t j = 0; j < want.outputs[i].outputs.size(); ++j) {
    const CompletionOutput& w = want.outputs[i].outputs[j];
    const CompletionOutput& g = got.outputs[i].outputs[j];
    EXPECT_EQ(w.token_ids, g.token_ids) << what << ", prompt " << i;
    EXPECT_EQ(w.logprobs, g.logprobs) << what << ", prompt " << i;  // bitwise: the state is the same
    EXPECT_EQ(w.text, g.text) << what << ", prompt " << i;
    EXPECT_EQ(w.finish_reason, g.finish_reason) << what << ", prompt " << i;
    EXPECT_EQ(w.stop_reason, g.stop_reason) << what << ", prompt " << i;
    }
  }
}

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

Workload workload() {
  const std::vector<std::string> texts = {
      "The kernel",
      "To install a package on Debian, run apt-get install followed by the name of the package. The",
      "The file system",
      "Debian is a free operating system. It uses the Linux kernel and provides thousands of packages that",
  };
  Workload w;
  for (const std::string& t : texts) w.prompts.push_back(default_tokenizer().encode(t));
  // The second wave: the same prompts again (whole-prefix hits) and extended (branch hits).
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> p = w.prompts[i];
    if (i % 2) p.insert(p.end(), w.prompts[0].begin(), w.prompts[0].end());
    w.prompts.push_back(p);
  }
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0;
    p.max_tokens = 20 + int(i % 3) * 17;  // 20, 37, 54: max_tokens cuts verifies
    p.logprobs = 1;
    if (i % 4 == 1) p.ignore_eos = true;
    if (i % 4 == 2) p.stop = {" the"};  // a stop string inside a run of accepted drafts
    if (i % 4 == 3) {  // penalties and min_tokens see the accepted drafts as a step-by-step run does
      p.repetition_penalty = 1.3;
      p.presence_penalty = 0.5;
      p.min_tokens = 6;
    }
    if (i == 5) p.n = 2;                // two completions: they decode without drafts
    if (i == 6) p.prompt_logprobs = 2;  // every prompt position computed, then speculation
    w.params.push_back(p);
  }
  return w;
}

TEST(Speculative, GreedyOutputsEqualTheTargetsAtK1To3) {
  const Workload w = workload();
  const SpecRun plain = run(default_model_config(0), w.prompts, w.params);
  EXPECT_EQ(plain.stats.spec_verifies, 0);
  bool stopped = false;
  for (const RequestOutput& o : plain.outputs) stopped = stopped || o.outputs[0].stop_reason == " the";
  EXPECT_TRUE(stopped) << "no completion ended at the stop string: the workload tests nothing there";
  for (int k = 1; k <= 3; ++k) {
    const SpecRun spec = run(default_model_config(k), w.prompts, w.params);
    expect_same(plain, spec, "K=" + std::to_string(k));
    const EngineStats& s = spec.stats;
    std::printf("  K=%d: %lld verifies, %lld drafts, %lld accepted (rate %.3f, mean acceptance length %.3f), "
                "%lld rollbacks (%lld replays), %lld prefix hit tokens\n",
                k, (long long)s.spec_verifies, (long long)s.spec_draft_tokens, (long long)s.spec_accepted_tokens,
                s.spec_acceptance_rate(), s.spec_mean_acceptance_length(), (long long)s.spec_rollbacks,
                (long long)s.spec_replays, (long long)s.prefix_hits);
    EXPECT_GT(s.spec_accepted_tokens, 0) << "the head never helped";
    EXPECT_GT(s.spec_rollbacks, 0) << "no rejection was rolled back: the rollback is untested";
    // The Qwen3.5 family stores per-token states: a rejection replays only in a step beside a
    // prefill chunk of more than 16 tokens.
    EXPECT_GT(s.spec_rollbacks, s.spec_replays) << "no rollback by the verify's per-token states";
    EXPECT_GT(s.prefix_hits, 0);
    EXPECT_LT(s.steps, plain.stats.steps) << "speculation did not save target forwards";
    ASSERT_EQ(s.spec_accepted_at.size(), size_t(k));
    int64_t sum = 0;
    for (int i = 0; i < k; ++i) {
      sum += s.spec_accepted_at[size_t(i)];
      EXPECT_LE(s.spec_accepted_at[size_t(i)], s.spec_drafted_at[size_t(i)]);
      if (i > 0) {
        EXPECT_LE(s.spec_accepted_at[size_t(i)], s.spec_accepted_at[size_t(i - 1)]);
      }
    }
    EXPECT_EQ(sum, s.spec_accepted_tokens);
    // /metrics carries them (vLLM's series names under strata:).
    server::LoopSnapshot snap;
    snap.stats = s;
    const std::string m = server::Metrics().render(snap, "m");
    EXPECT_NE(m.find("strata:spec_decode_num_accepted_tokens_total{model_name=\"m\"} " +
                     std::to_string(s.spec_accepted_tokens) + "\n"), std::string::npos) << m;
    EXPECT_NE(m.find("strata:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} " +
                     std::to_string(s.spec_accepted_at[0]) + "\n"), std::string::npos) << m;
    EXPECT_NE(m.find("strata:spec_decode_num_drafts_total{model_name=\"m\"} " + std::to_string(s.spec_verifies)),
              std::string::npos);
  }
  // Without speculation /metrics has no such series.
  server::LoopSnapshot snap;
  snap.stats = plain.stats;
  EXPECT_EQ(server::Metrics().render(snap, "m").find("spec_decode"), std::string::npos);
}

// A pool so small that sequences are preempted (and recomputed) while they speculate.
// A request of several completions never drafts; alone in the first steps (which then run
// without the hidden states the head reads) and beside a single one later, its outputs and the
// other's are those without speculation.
TEST(Speculative, ManyCompletionsRunBesideSpeculation) {
  const Tokenizer& tok = default_tokenizer();
  SamplingParams many = greedy_params(12, 1), one = greedy_params(12, 1);
  many.n = 2;
  const std::vector<std::vector<int32_t>> prompts = {tok.encode("The kernel"), tok.encode("Debian is")};
  const SpecRun plain = run(default_model_config(0), prompts, {many, one});
  for (int k : {1, 3}) {
    const SpecRun spec = run(default_model_config(k), prompts, {many, one});
    expect_same(plain, spec, "K=" + std::to_string(k));
    ASSERT_EQ(spec.outputs[0].outputs.size(), 2u);
    EXPECT_GT(spec.stats.spec_verifies, 0) << "the single completion never drafted";
  }
}

// A cache budget so small that sequences are preempted: from the plan of a roomy engine drafting
// k tokens, its slots and 6 pages of 16 tokens.
size_t preempting_budget(int k) {
  Engine probe(default_mtp_model(), default_model_config(k), GenerationDefaults::load(default_model_dir()));
  const MemoryPlan& plan = probe.memory_plan();
  return plan.bytes_per_slot * size_t(plan.seq_slots + plan.snapshot_slots) + plan.bytes_per_block * 6;
}

TEST(Speculative, GreedyOutputsEqualTheTargetsUnderPreemption) {
  const Workload w = workload();
  EngineConfig c0 = default_model_config(0), c2 = default_model_config(2);
  c0.kv_cache_memory = c2.kv_cache_memory = preempting_budget(2);
  const SpecRun plain = run(c0, w.prompts, w.params);
  const SpecRun spec = run(c2, w.prompts, w.params);

  EXPECT_GT(spec.stats.preemptions, 0) << "nothing was preempted: the test tests nothing";
  expect_same(plain, spec, "preempted, K=2");
}

// The workload as the draft chain takes it (engine_spec_chain.cpp): greedy without
// log-probabilities or penalties (min_tokens stays: its sequences verify on the host until they
// reach it), one completion each.
Workload chain_workload() {
  Workload w = workload();
  for (SamplingParams& p : w.params) {
    p.logprobs.reset();
    p.repetition_penalty = 1.0;
    p.presence_penalty = 0.0;
    p.n = 1;
  }
  return w;
}

// The greedy draft chain (acceptance, rollback and the next drafts on the model's device, one read
// back a step) keeps the outputs, at K = 1 to 3 with prefix hits, chunked prefill, stop strings,
// EOS and max_tokens, and under preemption; most verifies take it.
TEST(Speculative, DraftChainKeepsGreedyOutputs) {
  const Workload w = chain_workload();
  const SpecRun plain = run(default_model_config(0), w.prompts, w.params);
  for (int k = 1; k <= 3; ++k) {
    const SpecRun spec = run(default_model_config(k), w.prompts, w.params);
    expect_same(plain, spec, "chain, K=" + std::to_string(k));
    const EngineStats& s = spec.stats;
    std::printf("  K=%d: %lld steps, %lld chained, %lld verifies, %lld accepted of %lld, %lld rollbacks\n", k,
                (long long)s.steps, (long long)s.spec_chain_steps, (long long)s.spec_verifies,
                (long long)s.spec_accepted_tokens, (long long)s.spec_draft_tokens, (long long)s.spec_rollbacks);
    EXPECT_GT(s.spec_chain_steps, 0) << "the chain never ran";
    EXPECT_GT(s.spec_rollbacks, 0);
    EXPECT_GT(s.spec_accepted_tokens, 0);
    EXPECT_GT(s.prefix_hits, 0);
  }
  // One sequence at a time (batch 1, as a user's chat).
  const std::vector<std::vector<int32_t>> one = {w.prompts[1], w.prompts[3]};
  const std::vector<SamplingParams> one_params = {w.params[1], w.params[1]};
  const SpecRun plain_one = run(default_model_config(0), one, one_params);
  const SpecRun spec_one = run(default_model_config(3), one, one_params);
  expect_same(plain_one, spec_one, "chain, batch 1");
  EXPECT_GT(spec_one.stats.spec_chain_steps, spec_one.stats.spec_verifies * 3 / 4);
}

TEST(Speculative, DraftChainKeepsGreedyOutputsUnderPreemption) {
  const Workload w = chain_workload();
  EngineConfig c0 = default_model_config(0), c3 = default_model_config(3);
  c0.kv_cache_memory = c3.kv_cache_memory = preempting_budget(3);
  const SpecRun plain = run(c0, w.prompts, w.params);
  const SpecRun spec = run(c3, w.prompts, w.params);
  EXPECT_GT(spec.stats.preemptions, 0) << "nothing was preempted: the test tests nothing";
  EXPECT_GT(spec.stats.spec_chain_steps, 0);
  expect_same(plain, spec, "chain, preempted, K=3");
}

EngineConfig dynamic_config(int k, const DraftCosts& costs) {
  EngineConfig c = default_model_config(k);
  c.speculative.dynamic = true;
  c.speculative.costs = costs;
  c.speculative.measure_costs = false;  // the policy's choices by these costs, run after run
  return c;
}

// Verify rows nearly free (a GPU at small batch): sequences draft 0 to 3 tokens by their acceptance.
DraftCosts cheap_costs() {
  DraftCosts c;
  c.verify_row = 0.1;
  c.head_row = 0.05;
  c.replay_row = 0.5;
  return c;
}

void print_stats(const std::string& what, const EngineStats& s) {
  std::printf("  %s: %lld steps, %lld verifies, %lld drafts, %lld accepted (rate %.3f), drafted at 1..3: %lld %lld %lld\n",
              what.c_str(), (long long)s.steps, (long long)s.spec_verifies, (long long)s.spec_draft_tokens,
              (long long)s.spec_accepted_tokens, s.spec_acceptance_rate(), (long long)s.spec_drafted_at[0],
              (long long)s.spec_drafted_at[1], (long long)s.spec_drafted_at[2]);
}

// Dynamic draft length (draft_length.h) changes how many drafts a step verifies, never the
// outputs: greedy outputs equal those without speculation and with a fixed K, in batches with
// prefix hits, under the CPU's costs (which draft little) and cheap ones (k from 0 to K).
TEST(Speculative, DynamicDraftLengthKeepsGreedyOutputs) {
  const Workload w = workload();
  const SpecRun plain = run(default_model_config(0), w.prompts, w.params);
  const SpecRun fixed = run(default_model_config(3), w.prompts, w.params);
  expect_same(plain, fixed, "fixed K=3");
  const SpecRun cpu = run(dynamic_config(3, DraftCosts{}), w.prompts, w.params);
  expect_same(plain, cpu, "dynamic, the CPU's costs");
  const SpecRun cheap = run(dynamic_config(3, cheap_costs()), w.prompts, w.params);
  expect_same(plain, cheap, "dynamic, cheap verify rows");
  print_stats("fixed K=3", fixed.stats);
  print_stats("dynamic, CPU costs", cpu.stats);
  print_stats("dynamic, cheap", cheap.stats);
  EXPECT_GT(cpu.stats.spec_verifies, 0) << "no sequence started drafting or was probed";
  EXPECT_LT(cpu.stats.spec_draft_tokens * 3, fixed.stats.spec_draft_tokens) << "the CPU's costs did not cut drafting";
  EXPECT_EQ(cpu.stats.spec_drafted_at[1], 0) << "the CPU's costs never pay for a second draft";
  EXPECT_GT(cheap.stats.spec_drafted_at[2], 0) << "no sequence drafted K";
  EXPECT_LT(double(cheap.stats.spec_draft_tokens) / double(cheap.stats.spec_verifies),
            double(fixed.stats.spec_draft_tokens) / double(fixed.stats.spec_verifies))
      << "every verify had as many drafts as with a fixed K";
  EXPECT_GT(cheap.stats.spec_rollbacks, 0);
  EXPECT_LT(cheap.stats.steps, plain.stats.steps);
}

// Dynamic K where speculation never pays for itself (a step's fixed cost dwarfs every row): only
// the probes draft, all in the same steps, and the steps between run no head forward, their
// positions' head forwards deferred to the next probe step (Sequence::head_pending) or, where a
// sequence's kept rows fill up first, caught up at a step's launch (catch_up_head_at_launch); a
// prompt chunk too long to defer has its head KV written at launch (write_prompt_head_kv_at_launch). The outputs
// stay those without speculation, every draft is the one the head makes when it runs every step
// (head_defer_max 0), and the steps between probes overlap as without speculation: on the CPU, whose forward is chunk-invariant, the caught-up head KV is
// bit for bit the KV written step by step, so the acceptance at every position and the steps
// match. (Left unwritten, the head's attention reads stale pages: 10 of 37 drafts accepted
// against 19 of 45, measured when this test was written.)
TEST(Speculative, DeferredHeadForwardsCatchUpAtTheNextProbe) {
  const Workload w = workload();
  const SpecRun plain = run(default_model_config(0), w.prompts, w.params);
  DraftCosts never = cheap_costs();
  never.forward = 1000;
  EngineConfig deferring = dynamic_config(3, never), every_step = deferring;
  every_step.speculative.head_defer_max = 0;
  const SpecRun deferred = run(deferring, w.prompts, w.params);
  const SpecRun reference = run(every_step, w.prompts, w.params);
  expect_same(plain, deferred, "dynamic, probes only, head forwards deferred");
  expect_same(plain, reference, "dynamic, probes only, the head every step");
  print_stats("head every step", reference.stats);
  print_stats("head deferred", deferred.stats);
  std::printf("  deferred head positions %lld; head forwards %lld against %lld, and %lld head KV catch-ups at launch\n",
              (long long)deferred.stats.spec_head_deferred, (long long)deferred.stats.spec_draft_forwards,
              (long long)reference.stats.spec_draft_forwards, (long long)deferred.stats.spec_head_launch_catch_ups);
  EXPECT_GT(deferred.stats.spec_head_deferred, 0) << "no head forward was deferred";
  EXPECT_GT(deferred.stats.spec_head_launch_catch_ups, 0) << "no sequence's kept rows filled up between probes";
  EXPECT_EQ(reference.stats.spec_head_deferred, 0);
  EXPECT_EQ(reference.stats.spec_head_launch_catch_ups, 0);
  EXPECT_GT(deferred.stats.spec_head_prompt_writes, 0) << "no prompt chunk had its head KV written at launch";
  EXPECT_EQ(reference.stats.spec_head_prompt_writes, 0);
  EXPECT_LT(deferred.stats.spec_draft_forwards, reference.stats.spec_draft_forwards);
  EXPECT_GE(deferred.stats.spec_draft_tokens, 8) << "too few probes to compare";
  EXPECT_EQ(deferred.stats.spec_drafted_at, reference.stats.spec_drafted_at);
  EXPECT_EQ(deferred.stats.spec_accepted_at, reference.stats.spec_accepted_at)
      << "drafts after deferred head forwards differ from the head's every-step drafts";
  EXPECT_EQ(deferred.stats.steps, reference.stats.steps);
  // The steps that draft nothing and defer their head forwards are planned at launch, so the
  // next step is launched before their draws reach the host (overlapped), as without speculation.
  // (Steps of only multi-completion sequences, which never draft, overlap either way; draws
  // with penalties or grammars never do.)
  std::printf("  overlapped steps: %lld of %lld deferring, %lld of %lld with the head every step, %lld of %lld "
              "without speculation\n", (long long)deferred.stats.overlapped_steps, (long long)deferred.stats.steps,
              (long long)reference.stats.overlapped_steps, (long long)reference.stats.steps,
              (long long)plain.stats.overlapped_steps, (long long)plain.stats.steps);
  EXPECT_GE(deferred.stats.overlapped_steps * 10, plain.stats.overlapped_steps * 8)
      << "dynamic K's idle steps did not overlap as plain decoding's";
  EXPECT_GE(deferred.stats.overlapped_steps, reference.stats.overlapped_steps + 8)
      << "a step whose completion runs the head overlapped the next";
}

// One request at a time (batch 1), the second a whole-prefix hit of the first.
TEST(Speculative, DynamicDraftLengthKeepsGreedyOutputsAtBatchOne) {
  const Workload w = workload();
  const std::vector<std::vector<int32_t>> prompts = {w.prompts[1], w.prompts[1]};
  const std::vector<SamplingParams> params = {w.params[1], w.params[1]};
  const SpecRun plain = run(default_model_config(0), prompts, params);
  for (const DraftCosts& costs : {DraftCosts{}, cheap_costs()}) {
    const SpecRun dyn = run(dynamic_config(3, costs), prompts, params);
    expect_same(plain, dyn, "dynamic, batch 1");
    EXPECT_GT(dyn.stats.prefix_hits, 0);
    EXPECT_GT(dyn.stats.spec_verifies, 0);
  }
}

// The draft chain under dynamic K: a verify of k drafts (any k the policy or the token budget
// left), K drafted on the device, each sequence keeping as many as the policy then wants; the
// same outputs as without speculation, at batch 8 and at batch 1.
TEST(Speculative, DraftChainKeepsGreedyOutputsUnderDynamicK) {
  const Workload w = chain_workload();
  const SpecRun plain = run(default_model_config(0), w.prompts, w.params);
  const SpecRun dyn = run(dynamic_config(3, cheap_costs()), w.prompts, w.params);
  expect_same(plain, dyn, "chain, dynamic K");
  print_stats("chain, dynamic, cheap", dyn.stats);
  std::printf("  chained steps %lld of %lld\n", (long long)dyn.stats.spec_chain_steps, (long long)dyn.stats.steps);
  EXPECT_GT(dyn.stats.spec_chain_steps, 0);
  EXPECT_GT(dyn.stats.spec_rollbacks, 0);
  const std::vector<std::vector<int32_t>> one = {w.prompts[1], w.prompts[3]};
  const std::vector<SamplingParams> one_params = {w.params[1], w.params[1]};
  const SpecRun plain_one = run(default_model_config(0), one, one_params);
  const SpecRun dyn_one = run(dynamic_config(3, cheap_costs()), one, one_params);
  expect_same(plain_one, dyn_one, "chain, dynamic K, batch 1");
  EXPECT_GT(dyn_one.stats.spec_chain_steps, 0);
}

TEST(SpeculativeConfig, ParsesVllmsFlagAndNamesBadFields) {
  const SpeculativeConfig c = parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.method, "mtp");
  EXPECT_EQ(c.num_speculative_tokens, 3);
  EXPECT_TRUE(c.enabled());
  EXPECT_FALSE(c.dynamic) << "the draft length is fixed by default";
  EXPECT_TRUE(parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 3, "draft_length": "dynamic"})")
                  .dynamic);
  EXPECT_FALSE(parse_speculative_config(R"({"method": "mtp", "num_speculative_tokens": 3, "draft_length": "fixed"})")
                   .dynamic);
  auto message = [](const std::string& json) {
    try {
      parse_speculative_config(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"method": "eagle", "num_speculative_tokens": 3})").find("'method'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 0})").find("'num_speculative_tokens'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": "2"})").find("'num_speculative_tokens'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp"})").find("'num_speculative_tokens'"), std::string::npos);
  EXPECT_NE(message(R"({"num_speculative_tokens": 2})").find("'method'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 2, "draft_model": "x"})").find("'draft_model'"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 2, "draft_length": "adaptive"})")
                .find("'draft_length'"), std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 2, "draft_length": 1})").find("'draft_length'"),
            std::string::npos);
  EXPECT_NE(message(R"({"method": "mtp", "num_speculative_tokens": 2, "draft_len": "fixed"})").find("draft_length"),
            std::string::npos) << "the unknown field's message lists the known ones";
  EXPECT_NE(message("mtp").find("not JSON"), std::string::npos);
  EXPECT_NE(message("[1]").find("JSON object"), std::string::npos);
}

// A model without its head loaded cannot draft: the engine says so at start.
TEST(SpeculativeConfig, RefusesAModelWithoutItsHead) {
  std::shared_ptr<Model> plain(load_model(default_model_dir()));
  EngineConfig c = default_model_config(2);
  try {
    Engine e(plain, c, {});
    FAIL() << "an engine without the head started";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multi-token-prediction head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::testing
