// strata bench: offline throughput of the engine on random prompts.
//   strata bench --model DIR --num-prompts 64 --input-len 256 --output-len 64
// Every request arrives at once (vLLM's `bench throughput`); eos is ignored so each produces
// exactly --output-len tokens. Prints throughput, time to first token (TTFT) and time per
// output token after the first (TPOT), mean and percentiles. --roofline runs the GPU roofline
// benchmark instead (bench_roofline.h); `strata bench serve` is the load generator for an
// OpenAI-compatible server (bench_serve.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "strata/cli/bench_roofline.h"
#include "strata/cli/bench_serve.h"
#include "strata/cli/command.h"
#include "strata/cli/engine_options.h"
#include "strata/cli/latency_stats.h"
#include "strata/core/error.h"
#include "strata/engine/engine.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "serve")) return run_bench_serve(argc - 1, argv + 1);
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--roofline")) return run_roofline_bench(argc, argv);
  }
  CLI::App app{"Offline throughput benchmark on random prompts (strata bench serve --help: load a server)", "strata bench"};
  EngineOptions eo;
  int num_prompts = 32, input_len = 128, output_len = 32;
  uint64_t seed = 0;
  double temperature = 1.0, top_p = 1.0;
  int top_k = 0;
  add_engine_options(app, eo);
  app.add_option("--num-prompts", num_prompts, "requests (default 32)");
  app.add_option("--input-len", input_len, "prompt tokens per request (default 128)");
  app.add_option("--output-len", output_len, "generated tokens per request (default 32)");
  app.add_option("--seed", seed, "seed of the random prompts and of sampling (default 0)");
  app.add_option("--temperature", temperature, "sampling temperature (default 1; 0: greedy)");
  app.add_option("--top-p", top_p, "top-p (default 1: off)");
  app.add_option("--top-k", top_k, "top-k (default 0: off)");
  bool roofline = false;  // handled above, listed for --help
  app.add_flag("--roofline", roofline, "run the GPU roofline benchmark (needs the CUDA backend)");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(num_prompts > 0, "--num-prompts must be positive, got ", num_prompts);
  STRATA_CHECK(input_len > 0, "--input-len must be positive, got ", input_len);
  STRATA_CHECK(output_len > 0, "--output-len must be positive, got ", output_len);

  Engine engine(engine_config(eo));
  const int64_t vocab = engine.model_info().vocab_size;
  std::mt19937_64 rng(seed);
  SamplingParams params;
  params.temperature = temperature;
  params.top_p = top_p;
  params.top_k = top_k;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(num_prompts));
  for (auto& p : prompts) {
    for (int i = 0; i < input_len; ++i) p.push_back(int32_t(rng() % uint64_t(vocab)));
  }
  for (const auto& p : prompts) engine.validate_request(p, params);

  const double t0 = engine.now();
  for (int i = 0; i < num_prompts; ++i) {
    params.seed = seed + uint64_t(i);
    engine.add_request("bench-" + std::to_string(i), prompts[size_t(i)], params);
  }
  std::vector<double> ttft, tpot;
  int64_t generated = 0;
  // Steps that computed no prompt token (decode only): the engine's time per step, host work
  // included, to set beside the forward's (`bench --roofline`) at the same batch.
  double decode_time = 0;
  int64_t decode_steps = 0, decode_seqs = 0;
  while (engine.has_unfinished()) {
    const EngineStats before = engine.stats();
    const double s0 = engine.now();
    const std::vector<RequestOutput> outs = engine.step();
    const EngineStats after = engine.stats();
    if (after.computed_prompt_tokens == before.computed_prompt_tokens && before.running > 0) {
      decode_time += engine.now() - s0;
      ++decode_steps;
      decode_seqs += before.running;
    }
    for (const RequestOutput& o : outs) {
      for (const CompletionOutput& c : o.outputs) generated += int64_t(c.token_ids.size());
      if (!o.finished) continue;
      const RequestMetrics& m = o.metrics;
      ttft.push_back(m.first_token_time - t0);
      if (output_len > 1) tpot.push_back((m.finished_time - m.first_token_time) / (output_len - 1));
    }
  }
  const double elapsed = engine.now() - t0;
  const EngineStats st = engine.stats();
  const LatencyStats a = latency_stats(ttft), b = latency_stats(tpot);
  const double prompt_tokens = double(num_prompts) * input_len;
  std::printf("requests %d, input %d, output %d tokens each; %.3f s\n", num_prompts, input_len,
              output_len, elapsed);
  std::printf("throughput: %.2f requests/s, %.1f total tokens/s, %.1f output tokens/s\n",
              num_prompts / elapsed, (prompt_tokens + double(generated)) / elapsed,
              double(generated) / elapsed);
  std::printf("TTFT ms: mean %.2f, p50 %.2f, p99 %.2f\n", a.mean * 1e3, a.median * 1e3, a.p99 * 1e3);
  std::printf("TPOT ms: mean %.3f, p50 %.3f, p99 %.3f\n", b.mean * 1e3, b.median * 1e3, b.p99 * 1e3);
  if (decode_steps > 0) {
    std::printf("decode-only steps: %lld, mean %.3f ms a step, %.1f sequences a step on average\n",
                (long long)decode_steps, decode_time / double(decode_steps) * 1e3,
                double(decode_seqs) / double(decode_steps));
  }
  std::printf("engine: %lld steps (%lld overlapped), %lld tokens computed, %lld prefix-cache hit tokens, "
              "%lld preemptions, %lld draws dropped\n",
              (long long)st.steps, (long long)st.overlapped_steps, (long long)st.computed_tokens,
              (long long)st.prefix_hits, (long long)st.preemptions, (long long)st.dropped_draws);
  if (!st.spec_drafted_at.empty()) {
    std::printf("speculative: %lld verifies, %lld drafts, %lld accepted: acceptance rate %.3f, mean acceptance "
                "length %.3f; accepted / drafted by position:",
                (long long)st.spec_verifies, (long long)st.spec_draft_tokens, (long long)st.spec_accepted_tokens,
                st.spec_acceptance_rate(), st.spec_mean_acceptance_length());
    for (size_t i = 0; i < st.spec_drafted_at.size(); ++i) {
      std::printf(" %lld/%lld", (long long)st.spec_accepted_at[i], (long long)st.spec_drafted_at[i]);
    }
    std::printf("; %lld rollbacks, %lld of them replays (%lld tokens), %lld head forwards (%lld as graphs), %lld "
                "steps chained on the device, %lld positions' head forward deferred (caught up by %lld head KV writes at launch), %lld prompt head KV "
                "writes at launch\n",
                (long long)st.spec_rollbacks, (long long)st.spec_replays, (long long)st.spec_replayed_tokens,
                (long long)st.spec_draft_forwards, (long long)st.spec_draft_graphs, (long long)st.spec_chain_steps,
                (long long)st.spec_head_deferred, (long long)st.spec_head_launch_catch_ups,
                (long long)st.spec_head_prompt_writes);
    std::printf("speculative time: target forwards %.3f s, replays %.3f s, head %.3f s\n", st.spec_verify_seconds,
                st.spec_replay_seconds, st.spec_draft_seconds);
    if (!st.spec_costs.empty()) {
      std::printf("dynamic K's measured cost of a step verifying k drafts against a decode step's, by batch size:");
      for (const BatchCosts& c : st.spec_costs) {
        std::printf(" %d:", c.seqs);
        for (size_t k = 1; k < c.costs.step_ratio.size(); ++k) {
          if (c.costs.step_ratio[k] > 0) std::printf(" k%zu %.2f", k, c.costs.step_ratio[k]);
        }
      }
      std::printf("\n");
    }
  }
  std::printf("tokens per target forward and sequence: %.3f (%lld sampled tokens, %lld sequence-steps)\n",
              st.seq_steps ? double(st.sampled_tokens) / double(st.seq_steps) : 0.0, (long long)st.sampled_tokens,
              (long long)st.seq_steps);
  return 0;
}

const bool kRegistered = register_command({"bench", "offline throughput benchmark (bench serve: load a server)", run});

}  // namespace
}  // namespace strata::cli
