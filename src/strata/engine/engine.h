// Engine: the serving loop over one Model (vLLM V1's engine core).
//
//   Engine engine(config);
//   engine.add_request("a", prompt_ids, params);     // any thread; throws on bad input
//   while (engine.has_unfinished()) {
//     for (RequestOutput& o : engine.step()) ...     // one driver thread: new tokens per step
//   }
//
// add_request, abort and has_unfinished may be called from any thread (a server's handlers);
// step, stats and the cache accessors belong to the one thread that drives the engine. Each
// step schedules a batch (scheduler.h), runs Model::forward once, samples on the model's
// device (batch_sampler.h), applies the stop rules and reports what changed: every RequestOutput
// from step() is a delta (the tokens and text that reached the host in this step), and the last
// one of a request has finished = true (also after an abort: finish_reason "abort").
//
// Overlapped scheduling (EngineConfig::async_scheduling, vLLM's async scheduling): step()
// schedules and launches step N before it reads step N-1's draws, so the host's scheduling,
// batch building, stop checks, detokenization and reporting run while the GPU computes. A
// sequence whose token from N-1 is still on the device is scheduled with it (the batch feeds
// it on the device, core/batch.h); when that token ends the sequence, N's work for it is
// dropped. Outputs are the same as without overlap; they reach the caller one step() later.
// A step falls back to reading the previous draws first when a sequence in it has penalties
// or a structured output (they read its tokens on the host: a grammar's mask for step N follows
// the matcher's state after the token of step N-1). Its masks are still filled while the device
// runs its own forward (launch_step: the forward is queued before the sampler's begin).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/engine/batch_sampler.h"
#include "strata/engine/cache_manager.h"
#include "strata/engine/detokenizer.h"
#include "strata/engine/memory_budget.h"
#include "strata/engine/model_runner.h"
#include "strata/engine/output.h"
#include "strata/engine/sampler.h"
#include "strata/engine/sampling_params.h"
#include "strata/engine/scheduler.h"
#include "strata/engine/sequence.h"
#include "strata/engine/speculative_config.h"
#include "strata/models/model.h"

namespace strata {

struct EngineConfig {
  std::string model;          // checkpoint folder (config.json, generation_config.json)
  Device device = Device::kCpu;
  LoadFormat load_format = LoadFormat::kSafetensors;  // kDummy: random weights from config.json
  // Ranks of the model (models/parallel_model.h); the engine itself stays one, on rank 0.
  int32_t tensor_parallel_size = 1;
  bool enable_expert_parallel = false;  // whole experts per rank instead of split experts
  // The recurrent (Gated DeltaNet) state slots' dtype, LoadOptions::ssm_state_dtype
  // (--mamba-ssm-dtype): kF32 or kBF16. A model given to the engine ready-loaded must match it.
  DType ssm_state_dtype = DType::kF32;
  // The attention layers' KV pages, LoadOptions::kv_cache_dtype (--kv-cache-dtype). A model given
  // to the engine ready-loaded must match it.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  int32_t block_size = 16;    // tokens per KV page
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  std::optional<size_t> kv_cache_memory;  // bytes for all cache pools (see memory_budget.h)
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = true;
  int32_t prefix_state_interval = 64;  // pages between state snapshots in prefill; 0: off
  int32_t prefix_state_slots = -1;     // snapshot slots; -1: max_num_seqs
  LogprobsMode logprobs_mode = LogprobsMode::kProcessed;
  bool log_capacity = true;            // print the pool sizes to stderr at start-up
  bool enforce_eager = false;          // CUDA: no graphs for decode steps (engine/model_runner.h)
  bool async_scheduling = true;        // overlap the host's work with the device's (see above)
  // Speculative decoding with the model's multi-token-prediction head (engine_speculative.cpp;
  // the steps then run one after another, eagerly on CUDA).
  SpeculativeConfig speculative;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t graph_steps = 0;             // of those, decode and verify steps replayed as CUDA graphs
  int64_t overlapped_steps = 0;        // steps launched before the previous step's draws were read
  int64_t dropped_draws = 0;           // draws for sequences that had ended meanwhile
  int64_t computed_tokens = 0;         // tokens run through the model
  int64_t computed_prompt_tokens = 0;  // of those, at prompt positions
  int64_t sampled_tokens = 0;
  int64_t seq_steps = 0;               // sequences that sampled in a step, summed over steps
  int64_t prefix_queries = 0;          // tokens looked up in the prefix cache at admission
  int64_t prefix_hits = 0;             // tokens served from it
  int64_t preemptions = 0;
  int64_t forks = 0;                   // completions that shared a prompt's computed caches
  int64_t snapshots_stored = 0, snapshots_restored = 0;
  int64_t grammar_masks = 0;           // structured-output token masks filled (one per draw)
  double grammar_mask_seconds = 0;     // host (wall) time filling them
  int32_t running = 0, waiting = 0;
  CacheUsage cache;
  // Speculative decoding: sequence-steps that verified drafts, the drafts verified and accepted,
  // per draft position i the verifies that reached it and that accepted it, the
  // sequence-steps whose rejected drafts were rolled back, and of those the ones rolled back by
  // replaying the accepted tokens (the others copied the state the verify stored after them).
  int64_t spec_verifies = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_drafted_at, spec_accepted_at;
  int64_t spec_rollbacks = 0, spec_replays = 0, spec_replayed_tokens = 0;
  int64_t spec_draft_forwards = 0;    // head forwards (one per draft depth per step)
  int64_t spec_draft_graphs = 0;      // of those, replayed as CUDA graphs
  int64_t spec_chain_steps = 0;       // steps whose acceptance and drafts ran on the device (one read back)
  int64_t spec_head_deferred = 0;     // positions whose head forward waited for a drafting step (dynamic K)
  int64_t spec_head_launch_catch_ups = 0;  // head KV writes over kept rows at a step's launch (dynamic K)
  int64_t spec_head_prompt_writes = 0;  // head KV writes over prompt chunks at a step's launch (dynamic K)
  // Seconds in the target forwards of the steps, the replays and the head forwards.
  double spec_verify_seconds = 0, spec_replay_seconds = 0, spec_draft_seconds = 0;
  // Dynamic K: the costs measured so far (SpeculativeConfig::measure_costs), by batch size.
  std::vector<BatchCosts> spec_costs;
  double spec_acceptance_rate() const {
    return spec_draft_tokens ? double(spec_accepted_tokens) / double(spec_draft_tokens) : 0.0;
  }
  // Tokens a verify emits on average: the accepted drafts plus the target's own token.
  double spec_mean_acceptance_length() const {
    return spec_verifies ? 1.0 + double(spec_accepted_tokens) / double(spec_verifies) : 0.0;
  }
};

class Engine {
 public:
  // Loads config.model (and its generation_config.json).
  explicit Engine(const EngineConfig& config);
  // Runs an already loaded model; defaults as read by GenerationDefaults::load.
  Engine(std::shared_ptr<Model> model, const EngineConfig& config, GenerationDefaults defaults = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stop strings and text output need one; without it outputs carry ids only. Set it before
  // other threads add requests.
  void set_detokenizer(std::shared_ptr<Detokenizer> detokenizer);

  // Queues a request. Throws Error naming the field on bad input (empty prompt, an id outside
  // the vocabulary, a prompt that leaves no room in the context, invalid sampling values, a
  // request that can never fit in the page pool, a duplicate id).
  void add_request(const std::string& request_id, std::vector<int32_t> prompt,
                   const SamplingParams& params);
  // The checks of add_request without queueing (LLM::generate checks a whole batch first).
  void validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // Ends a request; its last output (finish_reason "abort") comes from the next step(). An
  // unknown or finished id is ignored.
  void abort(const std::string& request_id);
  bool has_unfinished() const { return unfinished_.load() > 0; }
  // Blocks the driver thread until a request is unfinished (or was aborted) or `timeout_s`
  // passes; true when there is work. For a server loop that idles without spinning.
  bool wait_for_work(double timeout_s);

  std::vector<RequestOutput> step();

  const ModelInfo& model_info() const { return model_->info(); }
  // The end-of-sequence ids a request stops at (config.json's and generation_config.json's):
  // a structured output's vocabulary allows them where its grammar can end.
  std::vector<int32_t> eos_ids() const;
  int64_t max_model_len() const { return max_model_len_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  EngineStats stats() const;
  // Drops every cached prefix (pages and snapshots); after it, an idle engine holds nothing.
  void clear_prefix_cache() { cache_->clear_prefix_cache(); }
  // Seconds since the engine started, the clock of RequestMetrics.
  double now() const;

 private:
  // A launched step whose draws have not reached the host.
  struct StepInFlight {
    int slot = 0;                        // the sampler's slot
    std::vector<SampleJob> jobs;
    std::vector<ScheduledChunk> fed;     // chunks computing a fed token: on_computed waits for it
    bool reads_tokens = false;           // a draw's sequence has penalties or a grammar (BatchSampler)
    // Speculative decoding: the chunks that verify drafts (their rows are not in `jobs`), and
    // every chunk with the batch (the draft head runs over their rows afterwards).
    struct Verify {
      Sequence* seq = nullptr;
      int32_t ctx_len = 0;
      int32_t first_row = 0;  // logits row of the sequence's last token; drafts follow it
      int32_t drafts = 0;
      bool stored_steps = false;  // the forward stored its per-token states (else: checkpoint, replay)
    };
    std::vector<Verify> verifies;
    Tensor logits;
    std::vector<ScheduledChunk> chunks;
    ForwardBatch batch;
    // Whether completing the step verifies drafts, drafts or runs the head (then the next step
    // waits for it: its outcome decides the next batch). Dynamic K plans a step without verifies
    // at its launch (plan_at_launch): `planned` holds each chunk's draft count, and the chunks
    // whose head forward is deferred have their hidden rows kept already (`kept`).
    bool spec_work = false;
    std::vector<int32_t> planned;
    std::vector<bool> kept;
    int32_t decode_rows = -1;  // its sequences when every one decodes a token (dynamic K's meter)
  };

  void init();
  void warm_up();
  bool overlap_possible() const;
  std::optional<StepInFlight> launch_step();
  void complete_step();                  // reads inflight_'s draws and applies them
  struct PromptLogitsRow {
    Sequence* seq;
    int32_t pos;  // the prompt position; its logits score prompt token pos + 1
    int32_t row;  // in the step's logits
  };
  void take_prompt_logprobs(const std::vector<PromptLogitsRow>& rows, const Tensor& logits);
  void drain_inbox();
  void admit_request(std::unique_ptr<Request> req);
  void abort_now(const std::string& id);
  void append_token(Sequence& seq, const SampleResult& r);
  void check_stop(Sequence& seq, int32_t token);
  void detokenize(Sequence& seq, bool flush);
  void fork_children(Sequence& parent, int32_t logits_row, std::vector<SampleJob>& jobs);
  void finish_sequence(Sequence& seq, const std::string& reason, const std::string& stop_reason = "");
  RequestOutput report(Request& req);
  // Speculative decoding (engine_speculative.cpp).
  void init_speculation();
  // What the draft chain (engine_spec_chain.cpp) brings back: per verify its accepted drafts and
  // the target's picks (drafts + 1 each), and the next drafts, depth-major ([K][verifies]).
  struct ChainResult {
    std::vector<int32_t> accepted, target, drafts;
  };
  // Accept, emit, roll back what rejected drafts touched; after the chain, by its picks (the
  // states are restored on the device already).
  void verify_drafts(StepInFlight& f, const ChainResult* chain = nullptr);
  // The greedy draft chain on the device: whether this step may take it (which gives its
  // sequences the pages the chain writes), and the step.
  bool chain_ready(const StepInFlight& f);
  void chain_step(StepInFlight& f);
  // logits: the row on the host, or null with `picked` the row's arg max (verified_on_device).
  void accept_row(Sequence& seq, const float* logits, int32_t picked, int32_t draft_index, bool& accepted);
  static bool verified_on_device(const Sequence& seq);
  void draft_tokens(const StepInFlight& f);  // chain the head K times over the step's rows
  // How many drafts each chunk's sequence wants after the step: K, or the dynamic policy's choice.
  std::vector<int32_t> wanted_drafts(const StepInFlight& f);
  // Dynamic K, a step without verifies: its draft counts planned and its deferred head rows kept
  // at launch, so that a step that then drafts nothing and runs no head lets the next overlap it.
  void plan_at_launch(StepInFlight& f);
  // Whether the chunk's sequence, drafting k after the step, skips the head (Sequence::head_pending),
  // with `pending` rows kept before the chunk (default: its head_pending).
  bool defers_head(const ScheduledChunk& c, int32_t k) const;
  bool defers_head(const ScheduledChunk& c, int32_t k, int32_t pending) const;
  // Writes the head's KV over the kept rows of these chunks' sequences but each one's newest, at launch.
  void catch_up_head_at_launch(const std::vector<const ScheduledChunk*>& due);
  // Whether the chunk, a prompt's, drafting k after the step, has its head KV written at launch.
  bool prompt_head_at_launch(const ScheduledChunk& c, int32_t k) const;
  // Writes those chunks' head KV at launch, their last row added to `rows` / `at` (keep_head_rows)
  // when its next token is the step's draw.
  void write_prompt_head_kv_at_launch(StepInFlight& f, std::vector<int32_t>& rows, std::vector<int32_t>& at);
  // A head KV write: seq's positions first .. first + n - 1 added to the batch `kv` (each with the
  // token after it), their hidden states' rows row0 .. row0 + n - 1 of the source to `rows`; then
  // the head's KV written from those rows of `source` (hidden_ or head_pending_).
  void add_head_kv_rows(const Sequence& seq, int32_t first, int32_t n, int32_t row0, ForwardBatch& kv,
                        std::vector<int32_t>& rows) const;
  void write_head_kv_from(const Tensor& source, const ForwardBatch& kv, const std::vector<int32_t>& rows);
  // A catch-up of seq's kept rows 0 .. n - 1 (its head_pending_ rows), positions first ..
  void add_kept_rows(const Sequence& seq, int32_t first, int32_t n, ForwardBatch& kv, std::vector<int32_t>& rows) const;
  // Defers the chunk's head forward: its new positions' hidden rows (from row0 of hidden_) are
  // added to `rows`, their head_pending_ rows to `at` (for keep_head_rows), head_pending grows.
  void defer_head(const ScheduledChunk& c, int32_t row0, std::vector<int32_t>& rows, std::vector<int32_t>& at);
  // Copies hidden_ rows `rows` to head_pending_ rows `at` (through its staging rows).
  void keep_head_rows(const std::vector<int32_t>& rows, const std::vector<int32_t>& at);
  // Dynamic K's measured costs (SpeculativeConfig::measure_costs): each call of step() that
  // launched a step of no prompt chunk is timed from its start to the next call's (what a user waits per step,
  // overlap and host work included) and counted by what it completed: a decode step that drafted
  // nothing (a decode sample), or a step where every sequence verified drafts and drafted again
  // (a speculating sample: speculation's steady state, the head forwards and the acceptance
  // included; a step where a few of many sequences verify costs about a decode step).
  struct CallCycle {
    double start = -1;
    bool launched = false;
    int32_t decode_rows = 0, spec_seqs = 0, spec_k = 0;
  };
  void measure_cycle(double now);  // the last call's cycle, ending now
  void note_completed(const StepInFlight& f);
  int32_t draft_budget(Sequence& seq, int32_t wanted) const;  // how many of them seq may get now
  // Greedy: the draft is `picked`, the head's arg max; sampled or structured: from the host row
  // `logits`. False when no draft may follow it.
  bool add_draft(Sequence& seq, const float* logits, int32_t picked, std::vector<int32_t>& context,
                 std::unordered_map<int32_t, int32_t>& counts, int32_t& grammar_steps);

  EngineConfig config_;
  std::shared_ptr<Model> model_;
  GenerationDefaults defaults_;
  std::shared_ptr<Detokenizer> detokenizer_;
  int64_t max_model_len_ = 0;
  MemoryPlan plan_;
  std::unique_ptr<CacheManager> cache_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<BatchSampler> sampler_;
  std::unique_ptr<ModelRunner> runner_;
  bool overlap_ = false;
  bool spec_ = false;
  std::unique_ptr<Sampler> spec_sampler_;
  std::unique_ptr<DraftLengthPolicy> draft_policy_;  // "draft_length": "dynamic"; null: fixed K
  StepCostMeter cost_meter_;
  CallCycle cycle_;
  int32_t meter_plain_steps_ = 0;  // steps left without drafts, for the meter's decode sample
  Tensor hidden_, replay_logits_, replay_hidden_, draft_logits_;
  Tensor chain_buf_;  // the draft chain's results on the device (engine_spec_chain.cpp)
  // Dynamic K: SpeculativeConfig::head_defer_max target hidden states a sequence slot whose head
  // forward waits (Sequence::head_pending), then as many staging rows; made on the first deferral.
  Tensor head_pending_;
  std::vector<double> spec_p_;
  std::vector<uint64_t> spec_allow_;  // a structured output's grammar mask (verify or draft)
  std::vector<float> spec_rows_;    // logits rows read on the host (verify or draft)
  std::vector<int32_t> spec_ids_;   // arg maxes read on the host
  std::optional<StepInFlight> inflight_;
  int next_slot_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::mt19937_64 seed_source_;

  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  uint64_t next_arrival_ = 0;
  EngineStats stats_;

  // Shared with other threads.
  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_cv_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::vector<std::string> abort_inbox_;
  std::unordered_set<std::string> live_ids_;
  std::atomic<int64_t> unfinished_{0};
};

}  // namespace strata
