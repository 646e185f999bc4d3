#include "strata/cli/engine_options.h"

#include <filesystem>

#include "strata/cli/common.h"
#include "strata/core/error.h"
#include "strata/engine/memory_budget.h"

namespace strata::cli {

void add_engine_options(CLI::App& app, EngineOptions& o) {
  app.add_option("--model", o.model_dir, "checkpoint folder (default: the bundled model)");
  app.add_option("--device", o.device, "cpu | cuda (default cpu)");
  add_load_format_option(app, o.load_format);
  app.add_option("--kv-cache-memory", o.kv_cache_memory,
                 cat("bytes for the KV pages and state slots, e.g. 512M, 4G (binary units; default: on CPU "
                     "what ", kCpuDefaultSequences, " sequences of --max-model-len tokens need, at most a quarter "
                     "of the memory; on CUDA from --gpu-memory-utilization)"));
  o.gpu_util_flag = app.add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                                   "on CUDA without --kv-cache-memory: fraction (0, 1] of the "
                                   "device memory the process may fill, caches included (default 0.9)");
  app.add_option("--block-size", o.block_size, cat("tokens per KV page (default ", o.block_size, ")"));
  app.add_option("--max-num-seqs", o.max_num_seqs,
                 cat("most sequences running at once (default ", o.max_num_seqs, ")"));
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 cat("most tokens per step; prefills are chunked to fit (default ", o.max_num_batched_tokens, ")"));
  app.add_option("--max-model-len", o.max_model_len,
                 "context length, prompt plus output (default: max_position_embeddings)");
  // Two plain flags (the --no- one wins): one flag with a negation shows "{false}" in --help.
  app.add_flag("--enable-prefix-caching", o.prefix_caching, "reuse cached prompt prefixes (the default)");
  app.add_flag("--no-enable-prefix-caching", o.no_prefix_caching, "do not reuse cached prompt prefixes");
  app.add_option("--prefix-state-interval", o.prefix_state_interval,
                 cat("snapshot the recurrent state every N pages of prefill (default ", o.prefix_state_interval,
                     "; 0: off)"));
  app.add_option("--prefix-state-slots", o.prefix_state_slots,
                 "state snapshot slots for prefix caching (default: --max-num-seqs)");
  app.add_option("--logprobs-mode", o.logprobs_mode,
                 "processed (after penalties and temperature, default) | raw (model logits)");
  app.add_flag("--enforce-eager", o.enforce_eager,
               "on CUDA: run decode steps without CUDA graphs (default: graphs where the model allows)");
  app.add_flag("--async-scheduling", o.async_scheduling,
               "launch each step before the previous step's tokens reach the host, so that the host's "
               "work overlaps the device's (the default)");
  app.add_flag("--no-async-scheduling", o.no_async_scheduling, "run the steps one after another");
  app.add_option("--speculative-config", o.speculative_config,
                 "speculative decoding with the model's multi-token-prediction head, as JSON: "
                 "'{\"method\": \"mtp\", \"num_speculative_tokens\": K}' (default: off); add "
                 "'\"draft_length\": \"dynamic\"' to choose each sequence's draft length in [0, K]");
  add_ssm_dtype_option(app, o.mamba_ssm_dtype);
  add_kv_cache_dtype_option(app, o.kv_cache_dtype);
  add_parallel_options(app, o.tensor_parallel_size, o.enable_expert_parallel);
}

void add_ssm_dtype_option(CLI::App& app, std::string& dtype) {
  app.add_option("--mamba-ssm-dtype,--mamba-ssm-cache-dtype", dtype,
                 "dtype of the recurrent (Gated DeltaNet) state: float32 (default) | bfloat16 (half the "
                 "state bytes; computed in fp32, rounded when stored)");
}

void add_kv_cache_dtype_option(CLI::App& app, std::string& dtype) {
  app.add_option("--kv-cache-dtype", dtype,
                 "storage of the attention layers' KV cache: auto (default: the activations' dtype) | fp8 "
                 "(= fp8_e4m3: e4m3 with a power-of-two scale a token and kv head, about half the bytes; the "
                 "Qwen3.5 family so far)");
}

void add_model_argument(CLI::App& app, EngineOptions& o) {
  app.add_option("model", o.model_argument, "checkpoint folder (as --model)");
}

void add_load_format_option(CLI::App& app, std::string& load_format) {
  app.add_option("--load-format", load_format,
                 "auto (default) | safetensors: the folder's weights; dummy: random weights of the shapes "
                 "config.json gives, made on the device (benchmarks without checkpoints)");
}

void add_parallel_options(CLI::App& app, int& tensor_parallel_size, bool& enable_expert_parallel) {
  app.add_option("--tensor-parallel-size", tensor_parallel_size,
                 "ranks the model is split over, threads of this process (default 1; CPU only so far)");
  app.add_flag("--enable-expert-parallel", enable_expert_parallel,
               "spread whole MoE experts over the ranks instead of splitting every expert's "
               "intermediate columns (needs --tensor-parallel-size > 1)");
}

void check_parallel_options(int tensor_parallel_size, bool enable_expert_parallel, const std::string& device) {
  STRATA_CHECK(tensor_parallel_size >= 1, "--tensor-parallel-size must be >= 1, got ", tensor_parallel_size);
  STRATA_CHECK(!enable_expert_parallel || tensor_parallel_size > 1,
               "--enable-expert-parallel needs --tensor-parallel-size > 1 (experts are spread over the ranks)");
  STRATA_CHECK(tensor_parallel_size == 1 || device == "cpu", "--tensor-parallel-size ", tensor_parallel_size,
               ": tensor parallelism runs on --device cpu only so far (the CUDA backend drives one GPU)");
}

EngineConfig engine_config(const EngineOptions& o) {
  EngineConfig c;
  STRATA_CHECK(o.model_argument.empty() || o.model_dir.empty(), "the model folder is given twice ('",
               o.model_argument, "' and --model '", o.model_dir, "'): give it once, either way");
  c.model = model_dir_or_default(o.model_argument.empty() ? o.model_dir : o.model_argument);
  check_parallel_options(o.tensor_parallel_size, o.enable_expert_parallel, o.device);
  if (!o.speculative_config.empty()) {  // by name, before the device is parsed (as the ranks are)
    c.speculative = parse_speculative_config(o.speculative_config);
  }
  c.device = parse_device(o.device);
  c.load_format = parse_load_format(o.load_format);
  c.ssm_state_dtype = parse_ssm_state_dtype(o.mamba_ssm_dtype);
  c.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  if (!o.kv_cache_memory.empty()) c.kv_cache_memory = parse_byte_size(o.kv_cache_memory, "--kv-cache-memory");
  STRATA_CHECK(o.gpu_memory_utilization > 0 && o.gpu_memory_utilization <= 1,
               "--gpu-memory-utilization must be in (0, 1], got ", o.gpu_memory_utilization);
  c.gpu_memory_utilization = o.gpu_memory_utilization;
  c.block_size = o.block_size;
  c.enforce_eager = o.enforce_eager;
  c.async_scheduling = !o.no_async_scheduling;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  c.enable_prefix_caching = o.prefix_caching && !o.no_prefix_caching;
  c.prefix_state_interval = o.prefix_state_interval;
  c.prefix_state_slots = o.prefix_state_slots;
  STRATA_CHECK(o.logprobs_mode == "processed" || o.logprobs_mode == "raw",
               "--logprobs-mode: expected processed or raw, got '", o.logprobs_mode, "'");
  c.logprobs_mode = o.logprobs_mode == "raw" ? LogprobsMode::kRaw : LogprobsMode::kProcessed;
  c.tensor_parallel_size = o.tensor_parallel_size;
  c.enable_expert_parallel = o.enable_expert_parallel;
  return c;
}

void add_sampling_options(CLI::App& app, SamplingOptions& o) {
  const char* from_model = "the model's generation_config.json, else ";
  o.temperature_flag = app.add_option("--temperature", o.temperature,
                                      cat("0 for greedy (default: ", from_model, "1)"));
  o.top_p_flag = app.add_option("--top-p", o.top_p, cat("nucleus sampling mass in (0, 1] (default: ", from_model, "1)"));
  o.top_k_flag = app.add_option("--top-k", o.top_k,
                                cat("keep the k most likely tokens; -1 or 0: off (default: ", from_model, "off)"));
  o.min_p_flag = app.add_option("--min-p", o.min_p,
                                cat("drop tokens below min_p times the most likely (default: ", from_model, "0)"));
  o.rep_flag = app.add_option("--repetition-penalty", o.repetition_penalty,
                              cat("> 0; 1 is off (default: ", from_model, "1)"));
  app.add_option("--presence-penalty", o.presence_penalty, "[-2, 2] (default 0)");
  app.add_option("--frequency-penalty", o.frequency_penalty, "[-2, 2] (default 0)");
  o.seed_flag = app.add_option("--seed", o.seed, "seed for reproducible sampling (default: a random seed)");
  app.add_option("--n", o.n, cat("completions per prompt, at most ", kMaxCompletionsPerPrompt, " (default 1)"));
  app.add_option("--max-tokens", o.max_tokens, cat("most tokens to generate (default ", o.max_tokens, ")"));
  app.add_option("--min-tokens", o.min_tokens, "fewest tokens before eos or a stop may end it (default 0)");
  app.add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-sequence tokens");
  app.add_option("--stop", o.stop, "a string that ends a completion, left out of the text (repeatable)");
  app.add_option("--stop-token-ids", o.stop_token_ids, "token ids that end a completion (comma-separated)")
      ->delimiter(',');
  app.add_option("--logit-bias", o.logit_bias, "ID:BIAS added to a token's logit (repeatable)");
  o.logprobs_flag = app.add_option("--logprobs", o.logprobs,
                                   "print the sampled token's log-probability and N alternatives");
  app.add_option("--generation-config", o.generation_config,
                 "where unset sampling flags take their defaults: auto (default): the model's "
                 "generation_config.json; vllm: the neutral defaults; or a folder holding a "
                 "generation_config.json");
}

SamplingParams sampling_params(const SamplingOptions& o) {
  SamplingParams p;
  if (o.temperature_flag->count()) p.temperature = o.temperature;
  if (o.top_p_flag->count()) p.top_p = o.top_p;
  if (o.top_k_flag->count()) p.top_k = o.top_k;
  if (o.min_p_flag->count()) p.min_p = o.min_p;
  if (o.rep_flag->count()) p.repetition_penalty = o.repetition_penalty;
  if (o.seed_flag->count()) p.seed = o.seed;
  if (o.logprobs_flag->count()) p.logprobs = o.logprobs;
  if (o.generation_config != "auto") {
    GenerationDefaults d;  // "vllm": none
    if (o.generation_config != "vllm") {
      STRATA_CHECK(std::filesystem::exists(o.generation_config + "/generation_config.json"),
                   "--generation-config: expected auto, vllm or a folder holding a generation_config.json, got '",
                   o.generation_config, "'");
      d = GenerationDefaults::load(o.generation_config);
    }
    p.temperature = p.temperature.value_or(d.temperature.value_or(1.0));
    p.top_p = p.top_p.value_or(d.top_p.value_or(1.0));
    p.top_k = p.top_k.value_or(d.top_k.value_or(0));
    p.min_p = p.min_p.value_or(d.min_p.value_or(0.0));
    p.repetition_penalty = p.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  }
  STRATA_CHECK(o.n >= 1 && o.n <= kMaxCompletionsPerPrompt, "--n must be in [1, ", kMaxCompletionsPerPrompt,
               "], got ", o.n);
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.n = o.n;
  p.max_tokens = o.max_tokens;
  p.min_tokens = o.min_tokens;
  p.ignore_eos = o.ignore_eos;
  p.stop_token_ids = o.stop_token_ids;
  p.stop = o.stop;
  for (const std::string& b : o.logit_bias) {
    const size_t colon = b.find(':');
    STRATA_CHECK(colon != std::string::npos && colon > 0, "--logit-bias: expected ID:BIAS, got '", b, "'");
    const std::vector<int32_t> id = parse_ids(b.substr(0, colon), "--logit-bias");
    try {
      size_t used = 0;
      const std::string v = b.substr(colon + 1);
      const double bias = std::stod(v, &used);
      STRATA_CHECK(used == v.size(), "--logit-bias: '", v, "' is not a number");
      p.logit_bias[id[0]] = bias;
    } catch (const std::logic_error&) {
      fail("--logit-bias: '", b.substr(colon + 1), "' is not a number");
    }
  }
  return p;
}

}  // namespace strata::cli
