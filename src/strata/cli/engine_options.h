// The engine and sampling flags shared by the commands that run the engine (generate, bench,
// and later serve).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "strata/engine/engine.h"
#include "strata/engine/sampling_params.h"

namespace strata::cli {

struct EngineOptions {
  std::string model_dir, device = "cpu", load_format = "auto", kv_cache_memory, logprobs_mode = "processed";
  std::string speculative_config;  // --speculative-config JSON (vLLM's flag)
  std::string mamba_ssm_dtype = "float32";  // --mamba-ssm-dtype (SGLang) / --mamba-ssm-cache-dtype (vLLM)
  std::string kv_cache_dtype = "auto";      // --kv-cache-dtype (vLLM's flag)
  int block_size = 16, max_num_seqs = 256, max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  double gpu_memory_utilization = 0.9;
  bool prefix_caching = true, enforce_eager = false, async_scheduling = true;
  int prefix_state_interval = 64, prefix_state_slots = -1;
  int tensor_parallel_size = 1;
  bool enable_expert_parallel = false;
  bool no_prefix_caching = false;  // --no-enable-prefix-caching
  bool no_async_scheduling = false;  // --no-async-scheduling (--async-scheduling is the default)
  std::string model_argument;      // `strata serve MODEL` (add_model_argument)
  CLI::Option* gpu_util_flag = nullptr;
};

// --load-format auto | safetensors | dummy (also on `strata logits`).
void add_load_format_option(CLI::App& app, std::string& load_format);
// --mamba-ssm-dtype float32 | bfloat16, also spelt --mamba-ssm-cache-dtype (also on `strata bench
// --roofline`): parse_ssm_state_dtype reads it.
void add_ssm_dtype_option(CLI::App& app, std::string& dtype);
// --kv-cache-dtype auto | fp8 | fp8_e4m3 (also on `strata info`): parse_kv_cache_dtype reads it.
void add_kv_cache_dtype_option(CLI::App& app, std::string& dtype);

// --tensor-parallel-size and --enable-expert-parallel (also on `strata logits`).
void add_parallel_options(CLI::App& app, int& tensor_parallel_size, bool& enable_expert_parallel);
// Their checks: a size >= 1, --device cpu (by name, before it is parsed) for more than one
// rank, expert parallelism only with ranks.
void check_parallel_options(int tensor_parallel_size, bool enable_expert_parallel, const std::string& device);

// --model --device --load-format --kv-cache-memory --gpu-memory-utilization --block-size --max-num-seqs
// --max-num-batched-tokens --max-model-len --enable-prefix-caching / --no-enable-prefix-caching
// --prefix-state-interval --prefix-state-slots --logprobs-mode --enforce-eager
// --async-scheduling / --no-async-scheduling --speculative-config --mamba-ssm-dtype --kv-cache-dtype
// --tensor-parallel-size --enable-expert-parallel
void add_engine_options(CLI::App& app, EngineOptions& o);
// The model folder as a positional argument too (`strata serve MODEL`, as `vllm serve` takes
// it); giving it and --model both is an error.
void add_model_argument(CLI::App& app, EngineOptions& o);
EngineConfig engine_config(const EngineOptions& o);

constexpr int kMaxCompletionsPerPrompt = 128;  // --n's bound (serve's --max-n default)

struct SamplingOptions {
  double temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  double presence_penalty = 0, frequency_penalty = 0;
  int top_k = 0, n = 1, max_tokens = 16, min_tokens = 0, logprobs = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::string generation_config = "auto";
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;
  std::vector<std::string> logit_bias;  // "ID:BIAS"
  CLI::Option *temperature_flag = nullptr, *top_p_flag = nullptr, *top_k_flag = nullptr,
              *min_p_flag = nullptr, *rep_flag = nullptr, *seed_flag = nullptr,
              *logprobs_flag = nullptr;
};

// --temperature --top-p --top-k --min-p --repetition-penalty --presence-penalty
// --frequency-penalty --seed --n --max-tokens --min-tokens --ignore-eos --stop --stop-token-ids
// --logit-bias ID:BIAS --logprobs N --generation-config auto|vllm|DIR. Set o.max_tokens to the
// command's default before calling (the help text shows it).
void add_sampling_options(CLI::App& app, SamplingOptions& o);
// Unset sampling flags take their defaults as --generation-config says: auto, the model's
// generation_config.json (the engine applies it); vllm, the neutral defaults (temperature 1,
// top-p 1, top-k off, min-p 0, repetition penalty 1); DIR, DIR/generation_config.json.
SamplingParams sampling_params(const SamplingOptions& o);

}  // namespace strata::cli
