#include "strata/engine/engine.h"
#include "strata/engine/structured_output.h"

#include <algorithm>
#include <cstdio>

#include "strata/core/error.h"
#include "strata/engine/prompt_logprobs.h"
#include "strata/models/parallel_model.h"

namespace strata {

namespace {

// The head is loaded only for speculative decoding; where the engine cannot draft yet (tensor
// parallelism), the flag is refused before the weights are read.
LoadOptions load_options(const EngineConfig& config) {
  LoadOptions o{config.device, config.load_format, {}};
  o.ssm_state_dtype = config.ssm_state_dtype;
  o.kv_cache_dtype = config.kv_cache_dtype;
  if (config.speculative.enabled()) {
    STRATA_CHECK(config.tensor_parallel_size == 1, "--speculative-config: speculative decoding does not run with "
                 "--tensor-parallel-size > 1 yet");
    o.mtp = true;
  }
  return o;
}

}  // namespace

Engine::Engine(const EngineConfig& config)
    : config_(config),
      model_(load_parallel_model(config.model, load_options(config),
                                 {config.tensor_parallel_size, config.enable_expert_parallel})),
      defaults_(GenerationDefaults::load(config.model)) {
  init();
}

Engine::Engine(std::shared_ptr<Model> model, const EngineConfig& config, GenerationDefaults defaults)
    : config_(config), model_(std::move(model)), defaults_(std::move(defaults)) {
  STRATA_CHECK(model_ != nullptr, "engine: no model");
  init();
}

Engine::~Engine() {
  // The device may still be drawing the last launched step; its buffers stay until it is done.
  if (inflight_) {
    try {
      (void)sampler_->end(inflight_->slot);
    } catch (const std::exception&) {
    }
  }
}

// On the CPU the runner fills the fed tokens in on the host; on CUDA the forward must read the
// token ids on the device only, as the models that allow graphs do.
bool Engine::overlap_possible() const {
  return config_.async_scheduling && (model_->device() == Device::kCpu || model_->info().cuda_graphs);
}

void Engine::init() {
  start_ = std::chrono::steady_clock::now();
  seed_source_.seed(std::random_device{}());
  const ModelInfo& info = model_->info();
  const int64_t max_pos = info.max_position_embeddings;
  max_model_len_ = config_.max_model_len > 0 ? config_.max_model_len : max_pos;
  STRATA_CHECK(config_.max_model_len >= 0, "--max-model-len must be positive, got ",
               config_.max_model_len);
  STRATA_CHECK(max_model_len_ > 1, "--max-model-len: the model declares no max_position_embeddings; ",
               "give --max-model-len");
  STRATA_CHECK(max_pos <= 0 || max_model_len_ <= max_pos, "--max-model-len ", max_model_len_,
               " exceeds the model's max_position_embeddings ", max_pos);
  STRATA_CHECK(max_model_len_ <= INT32_MAX / 2, "--max-model-len ", max_model_len_, " is too large");
  STRATA_CHECK(config_.prefix_state_interval >= 0, "--prefix-state-interval must be >= 0, got ",
               config_.prefix_state_interval);
  STRATA_CHECK(config_.prefix_state_slots >= -1, "--prefix-state-slots must be >= 0, got ",
               config_.prefix_state_slots);
  for (const LayerCacheSpec& layer : info.cache.layers) {
    for (const SlotCacheSpec& slot : layer.slots) {
      STRATA_CHECK(slot.name != "ssm" || slot.dtype == config_.ssm_state_dtype, "--mamba-ssm-dtype ",
                   dtype_name(config_.ssm_state_dtype), ": the model's recurrent state slots are ",
                   dtype_name(slot.dtype), " (load it with LoadOptions::ssm_state_dtype to match)");
    }
    for (const PagedCacheSpec& p : layer.paged) {
      STRATA_CHECK(p.name != "k" || (p.dtype == DType::kF8E4M3) == (config_.kv_cache_dtype == KvCacheDtype::kFp8E4M3),
                   "--kv-cache-dtype ", kv_cache_dtype_name(config_.kv_cache_dtype), ": the model's KV pages are ",
                   dtype_name(p.dtype), " (load it with LoadOptions::kv_cache_dtype to match)");
    }
  }
  MemoryRequest mr;
  mr.kv_cache_memory = config_.kv_cache_memory;
  mr.gpu_memory_utilization = config_.gpu_memory_utilization;
  mr.block_size = config_.block_size;
  mr.max_num_seqs = config_.max_num_seqs;
  mr.snapshot_slots = !config_.enable_prefix_caching ? 0
                      : config_.prefix_state_slots < 0 ? config_.max_num_seqs
                                                       : config_.prefix_state_slots;
  mr.max_model_len = max_model_len_;
  init_speculation();
  // Speculative decoding prices every page with the head's KV and every slot with a checkpoint
  // copy (only sequence slots have one: the snapshot slots are over-priced, never under).
  CacheSpec priced = info.cache;
  // With per-token states (ModelInfo::state_step_tokens), K copies a slot instead (the first
  // doubling as the checkpoint), so that a rejection needs no replay.
  const int32_t state_steps = spec_ && config_.speculative.num_speculative_tokens < info.state_step_tokens
                                  ? config_.speculative.num_speculative_tokens
                                  : 0;
  if (spec_ && config_.speculative.dynamic) {
    // Where the verify stores its per-token states, a rejection copies a slot: no replay to price.
    // Measured costs: a batch size not measured yet is priced cheap (a verify row a tenth of a
    // decode step's, as on a GPU at small batch), so that speculation is tried there and measured.
    DraftCosts costs = config_.speculative.costs;
    costs.replays = state_steps == 0;
    if (config_.speculative.measure_costs) costs = DraftCosts::from_step_times(1.0, 1.1, 1);
    draft_policy_ = std::make_unique<DraftLengthPolicy>(config_.speculative.num_speculative_tokens, costs);
  }
  if (spec_) {
    priced.layers.insert(priced.layers.end(), info.mtp_cache.begin(), info.mtp_cache.end());
    for (int32_t i = 0; i < std::max(1, state_steps); ++i) {
      for (const LayerCacheSpec& l : info.cache.layers) priced.layers.push_back({{}, l.slots});
    }
  }
  // Before the plan: on CUDA the runner's graphs hold one logits buffer for all of them (256 rows
  // of the vocabulary, 254 MB at 248k), which the free memory the plan reads then leaves out.
  runner_ = std::make_unique<ModelRunner>(*model_, config_.enforce_eager);
  if (draft_policy_) draft_policy_->set_uniform(runner_->uses_graphs());
  warm_up();
  plan_ = plan_memory(priced, mr, model_->device());
  if (config_.log_capacity) std::fprintf(stderr, "strata: %s\n", plan_.describe().c_str());
  CacheConfig cc;
  cc.block_size = plan_.block_size;
  cc.num_blocks = plan_.num_blocks;
  cc.seq_slots = plan_.seq_slots;
  cc.snapshot_slots = plan_.snapshot_slots;
  cc.prefix_caching = config_.enable_prefix_caching;
  cc.state_interval = config_.prefix_state_interval;
  cc.speculative = spec_;
  cc.state_steps = state_steps;
  cache_ = std::make_unique<CacheManager>(*model_, cc);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{config_.max_num_seqs, config_.max_num_batched_tokens}, *cache_);
  sampler_ = std::make_unique<BatchSampler>(info.vocab_size, config_.logprobs_mode);
  // With speculation a verify's result decides the next step's batch: only dynamic K's steps
  // that draft nothing and run no head (StepInFlight::spec_work) are overlapped.
  overlap_ = overlap_possible() && (!spec_ || draft_policy_);
  // CUDA graphs captured now, as vLLM does, not by the first requests of each batch size.
  const double capture_start = now();
  const int32_t verify_tokens = spec_ ? config_.speculative.num_speculative_tokens + 1 : 0;
  const int graphs = runner_->capture_graphs(cache_->caches(), std::min(config_.max_num_seqs, plan_.seq_slots),
                                             verify_tokens, cache_->state_steps(), draft_policy_ != nullptr);
  if (config_.log_capacity && graphs > 0) {
    std::fprintf(stderr, "strata: %d CUDA graphs captured in %.2f s (--enforce-eager: none)\n", graphs,
                 now() - capture_start);
  }
}

// CUDA: one forward of the largest step the scheduler makes (max_num_batched_tokens prompt tokens
// of one sequence, in a cache of its own), as vLLM's profile run: its workspace is then in use
// when the pools are sized from the free memory, and the first request does not wait for the
// workspace to grow and the GEMM algorithms to be picked (on the H200, 8192 tokens of the
// Qwen3.5-35B-A3B shape: the first step took 405 ms against 128 ms for the next ones).
void Engine::warm_up() {
  if (model_->device() != Device::kCuda) return;
  const int32_t n = int32_t(std::min<int64_t>(config_.max_num_batched_tokens, max_model_len_ - 1));
  if (n <= 0) return;
  const int32_t bs = config_.block_size, pages = (n + bs - 1) / bs;
  ForwardBatch b;
  SeqInBatch s;
  s.q_start = 0;
  s.q_len = n;
  s.ctx_len = 0;
  s.state_slot = 0;
  for (int32_t p = 0; p < pages; ++p) s.block_table.push_back(p);
  b.seqs.push_back(std::move(s));
  b.token_ids.assign(size_t(n), 0);
  for (int32_t p = 0; p < n; ++p) b.positions.push_back(p);
  b.logit_rows.push_back(n - 1);
  try {
    Caches caches = Caches::allocate(model_->info().cache, pages, bs, 1, model_->device());
    Tensor logits;
    model_->forward(b, caches, logits);
    (void)logits.to(Device::kCpu);  // waits for it
  } catch (const std::exception& e) {
    fail("engine: the start-up step of ", n, " tokens (--max-num-batched-tokens) failed: ", e.what());
  }
}

void Engine::set_detokenizer(std::shared_ptr<Detokenizer> detokenizer) {
  detokenizer_ = std::move(detokenizer);
}

double Engine::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Engine::validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  const ModelInfo& info = model_->info();
  STRATA_CHECK(!prompt.empty(), "prompt: no tokens (the prompt is empty)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    STRATA_CHECK(prompt[i] >= 0 && prompt[i] < info.vocab_size, "prompt: token id ", prompt[i],
                 " at position ", i, " is outside the vocabulary [0, ", info.vocab_size, ")");
  }
  STRATA_CHECK(int64_t(prompt.size()) < max_model_len_, "prompt: ", prompt.size(),
               " tokens leave no room to generate within the context length of ", max_model_len_,
               " (max_model_len)");
  const ResolvedSampling r = resolve_sampling(params, defaults_, info.eos_token_ids, info.vocab_size);
  STRATA_CHECK(params.stop.empty() || detokenizer_ != nullptr,
               "sampling: stop: stop strings need a detokenizer, and this engine has none");
  const int64_t longest = std::min<int64_t>(int64_t(prompt.size()) + params.max_tokens, max_model_len_);
  STRATA_CHECK(cache_->pages_for(longest) <= plan_.num_blocks, "request: ", longest,
               " tokens need ", cache_->pages_for(longest), " KV pages but the pool has only ",
               plan_.num_blocks, "; raise --kv-cache-memory or lower max_tokens");
}

std::vector<int32_t> Engine::eos_ids() const {
  const ModelInfo& info = model_->info();
  return resolve_sampling(SamplingParams{}, defaults_, info.eos_token_ids, info.vocab_size).eos_ids;
}

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt,
                         const SamplingParams& params) {
  validate_request(prompt, params);
  const ModelInfo& info = model_->info();
  auto req = std::make_unique<Request>();
  req->id = request_id;
  req->sampling = resolve_sampling(params, defaults_, info.eos_token_ids, info.vocab_size);
  req->metrics.arrival_time = now();
  req->metrics.num_prompt_tokens = int32_t(prompt.size());
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  STRATA_CHECK(!live_ids_.count(request_id), "request: id '", request_id, "' is already in use");
  for (int i = 0; i < params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = req.get();
    seq->index = i;
    seq->tokens = prompt;
    seq->prompt_len = int32_t(prompt.size());
    seq->request_wants_prompt_logprobs = params.prompt_logprobs.has_value();
    if (params.structured) seq->matcher = std::make_unique<grammar::GrammarMatcher>(params.structured->grammar);
    seq->token_limit = int32_t(std::min<int64_t>(int64_t(prompt.size()) + params.max_tokens, max_model_len_));
    if (params.seed) {
      std::seed_seq ss{uint32_t(*params.seed), uint32_t(*params.seed >> 32), uint32_t(i)};
      seq->rng.seed(ss);
    } else {
      seq->rng.seed(seed_source_());
    }
    req->seqs.push_back(std::move(seq));
  }
  live_ids_.insert(request_id);
  inbox_.push_back(std::move(req));
  ++unfinished_;
  inbox_cv_.notify_all();
}

bool Engine::wait_for_work(double timeout_s) {
  std::unique_lock<std::mutex> lock(inbox_mutex_);
  return inbox_cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] {
    return unfinished_.load() > 0 || !abort_inbox_.empty();
  });
}

void Engine::abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  abort_inbox_.push_back(request_id);
  inbox_cv_.notify_all();
}

void Engine::drain_inbox() {
  std::vector<std::unique_ptr<Request>> adds;
  std::vector<std::string> aborts;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    adds.swap(inbox_);
    aborts.swap(abort_inbox_);
  }
  for (auto& r : adds) admit_request(std::move(r));
  for (const std::string& id : aborts) abort_now(id);
}

void Engine::admit_request(std::unique_ptr<Request> req) {
  req->arrival = next_arrival_++;
  Request& r = *req;
  requests_[r.id] = std::move(req);
  scheduler_->add(r.seqs[0].get());
  // Completions 1..n-1 wait for completion 0's prompt and then share its pages.
  for (size_t i = 1; i < r.seqs.size(); ++i) r.seqs[i]->status = SeqStatus::kPendingFork;
}

void Engine::abort_now(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (auto& s : it->second->seqs) {
    if (!s->is_finished()) finish_sequence(*s, "abort");
  }
  it->second->aborted = true;
}

void Engine::finish_sequence(Sequence& seq, const std::string& reason, const std::string& stop_reason) {
  seq.finish_reason = reason;
  seq.stop_reason = stop_reason;
  scheduler_->finish(&seq);
  Request& req = *seq.request;
  const bool all = std::all_of(req.seqs.begin(), req.seqs.end(),
                               [](const auto& s) { return s->is_finished(); });
  if (all) req.metrics.finished_time = now();
}

void Engine::append_token(Sequence& seq, const SampleResult& r) {
  seq.tokens.push_back(r.token);
  ++seq.output_counts[r.token];
  if (seq.matcher) {
    const StructuredOutput& so = *seq.request->sampling.params.structured;
    STRATA_CHECK(so.is_end(r.token) || so.accept(*seq.matcher, r.token),
                 "structured output: the grammar refused the sampled token ", r.token);
  }
  if (seq.request->sampling.params.logprobs) {
    seq.new_logprobs.push_back(r.logprob);
    seq.new_top_logprobs.push_back(r.top);
  }
  ++stats_.sampled_tokens;
  if (seq.request->metrics.first_token_time == 0) seq.request->metrics.first_token_time = now();
}

namespace {

bool ends_incomplete(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;  // U+FFFD
}

}  // namespace

// vLLM's incremental detokenization over a whole-sequence decode(): the new text is
// decode(out[prefix:]) minus decode(out[prefix:read]), a short window of emitted tokens giving
// the decoder its context (leading spaces, multi-byte characters). While the result ends in
// an incomplete character it waits for more tokens, unless `flush`.
void Engine::detokenize(Sequence& seq, bool flush) {
  const auto out = seq.tokens.begin() + seq.prompt_len;
  const std::string full = detokenizer_->decode(std::vector<int32_t>(out + seq.detok_prefix, seq.tokens.end()));
  const std::string prefix = seq.detok_read > seq.detok_prefix
      ? detokenizer_->decode(std::vector<int32_t>(out + seq.detok_prefix, out + seq.detok_read))
      : std::string();
  if (full.size() <= prefix.size() || (ends_incomplete(full) && !flush)) return;
  seq.text += full.substr(prefix.size());
  seq.detok_prefix = seq.detok_read;
  seq.detok_read = seq.num_generated();
}

void Engine::check_stop(Sequence& seq, int32_t token) {
  const ResolvedSampling& p = seq.request->sampling;
  const SamplingParams& sp = p.params;
  const bool text = detokenizer_ && (sp.detokenize || !sp.stop.empty());
  if (text) {
    const size_t before = seq.text.size();
    detokenize(seq, false);
    if (seq.num_generated() >= sp.min_tokens && !sp.stop.empty() && seq.text.size() > before) {
      size_t longest = 0;
      for (const std::string& s : sp.stop) longest = std::max(longest, s.size());
      const size_t from = before >= longest ? before - longest + 1 : 0;
      size_t best = std::string::npos;
      const std::string* which = nullptr;
      for (const std::string& s : sp.stop) {
        const size_t at = seq.text.find(s, from);
        if (at != std::string::npos && at < best) {
          best = at;
          which = &s;
        }
      }
      if (which) {
        seq.text.resize(best + (sp.include_stop_str_in_output ? which->size() : 0));
        finish_sequence(seq, "stop", *which);
        return;
      }
    }
  }
  std::string reason, stop_reason;
  if (seq.num_generated() >= sp.min_tokens) {
    if (std::binary_search(p.eos_ids.begin(), p.eos_ids.end(), token)) {
      reason = "stop";
    } else if (std::find(sp.stop_token_ids.begin(), sp.stop_token_ids.end(), token) !=
               sp.stop_token_ids.end()) {
      reason = "stop";
      stop_reason = std::to_string(token);
    }
  }
  if (reason.empty() && seq.matcher && seq.matcher->is_terminated()) reason = "stop";
  if (reason.empty() && (seq.num_generated() >= sp.max_tokens || seq.num_tokens() >= max_model_len_)) {
    reason = "length";
  }
  if (reason.empty()) return;
  if (text) detokenize(seq, true);
  finish_sequence(seq, reason, stop_reason);
}

// The children of a request's first completion share its computed prompt from the step that
// samples its first token: each forks now (or computes the prompt itself when the pools or
// max-num-seqs say no) and draws its own first token from the same logits row.
void Engine::fork_children(Sequence& parent, int32_t logits_row, std::vector<SampleJob>& jobs) {
  Request& req = *parent.request;
  for (size_t i = 1; i < req.seqs.size(); ++i) {
    Sequence& child = *req.seqs[i];
    if (child.status != SeqStatus::kPendingFork) continue;
    if (scheduler_->can_run_more() && cache_->fork(parent, child)) {
      scheduler_->add_running(&child);
      ++stats_.forks;
      jobs.push_back({&child, logits_row});
    } else {
      scheduler_->add(&child);  // computes the prompt itself (prefix caching helps)
    }
  }
}

std::vector<RequestOutput> Engine::step() {
  const double start = now();
  measure_cycle(start);
  cycle_ = CallCycle{start};
  drain_inbox();
  if (inflight_ && (!overlap_ || inflight_->reads_tokens || inflight_->spec_work)) complete_step();
  std::optional<StepInFlight> launched = launch_step();
  if (inflight_) {
    complete_step();  // the previous step's draws, while the device runs the new step
    if (launched) ++stats_.overlapped_steps;
  }
  if (launched) {
    // The fed tokens are on the host now, so the pages they fill can be hashed.
    for (const ScheduledChunk& c : launched->fed) {
      if (c.seq->status == SeqStatus::kRunning) cache_->on_computed(*c.seq, c.samples);
    }
    launched->fed.clear();
    inflight_ = std::move(launched);
    if (!overlap_) complete_step();
  }
  // Report in arrival order, so that callers see a deterministic sequence.
  std::vector<RequestOutput> out;
  std::vector<Request*> order;
  for (auto& [id, req] : requests_) order.push_back(req.get());
  std::sort(order.begin(), order.end(), [](const Request* a, const Request* b) { return a->arrival < b->arrival; });
  std::vector<std::string> done;
  for (Request* req : order) {
    if (!req->finished_reported) {
      RequestOutput o = report(*req);
      if (!o.outputs.empty() || o.finished || !o.prompt_logprobs.empty()) out.push_back(std::move(o));
    }
    // A finished request stays until no draw in flight points at it.
    const bool drawing = std::any_of(req->seqs.begin(), req->seqs.end(),
                                     [](const auto& sq) { return sq->pending_draws > 0; });
    if (req->finished_reported && !drawing) done.push_back(req->id);
  }
  if (!done.empty()) {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    for (const std::string& id : done) {
      requests_.erase(id);
      live_ids_.erase(id);
      --unfinished_;
    }
  }
  return out;
}

std::optional<Engine::StepInFlight> Engine::launch_step() {
  const bool behind = inflight_.has_value();
  const SchedulerOutput so = scheduler_->schedule();
  if (so.chunks.empty()) return std::nullopt;
  ForwardBatch batch;
  batch.token_ids.reserve(size_t(so.num_tokens));
  batch.positions.reserve(size_t(so.num_tokens));
  std::vector<bool> fed(so.chunks.size(), false);
  // Speculative rollback by per-token states when the pools hold them and the model stores them
  // for every sequence of this batch (a long prefill chunk beside the verifies: not).
  bool store_steps = cache_->state_steps().count > 0;
  for (const ScheduledChunk& c : so.chunks) store_steps = store_steps && c.q_len <= model_->info().state_step_tokens;
  std::vector<PromptLogitsRow> prompt_rows;  // logits rows for prompt logprobs still to compute
  std::vector<int32_t> sample_row(so.chunks.size(), -1);
  std::vector<StepInFlight::Verify> verifies;
  for (size_t ci = 0; ci < so.chunks.size(); ++ci) {
    const ScheduledChunk& c = so.chunks[ci];
    SeqInBatch s;
    s.q_start = batch.num_tokens();
    s.q_len = c.q_len;
    s.ctx_len = c.ctx_len;
    s.block_table = c.seq->block_table;
    s.state_slot = c.seq->state_slot;
    for (int32_t i = 0; i < c.q_len; ++i) {
      const int32_t pos = c.ctx_len + i;
      if (pos < c.seq->num_tokens()) {
        batch.token_ids.push_back(c.seq->tokens[size_t(pos)]);
      } else if (!c.seq->drafts.empty()) {  // speculative decoding: a draft to verify
        batch.token_ids.push_back(c.seq->drafts.at(size_t(pos - c.seq->num_tokens())));
      } else {  // the token the previous step drew, still on the device
        STRATA_CHECK(inflight_ && c.seq->pending_draws == 1 && pos == c.seq->num_tokens(),
                     "engine: position ", pos, " has no token and no draw in flight");
        batch.feed_rows.push_back(batch.num_tokens());
        batch.feed_from.push_back(c.seq->pending_draw);
        batch.token_ids.push_back(0);
        fed[ci] = true;
      }
      batch.positions.push_back(pos);
    }
    if (c.seq->needs_prompt_logits()) {
      // Position pos's logits score prompt token pos + 1; the last prompt position samples.
      const int32_t first = std::max(c.ctx_len, int32_t(c.seq->prompt_logprobs.size()));
      const int32_t end = std::min(c.ctx_len + c.q_len, c.seq->prompt_len - 1);
      for (int32_t pos = first; pos < end; ++pos) {
        prompt_rows.push_back({c.seq, pos, int32_t(batch.logit_rows.size())});
        batch.logit_rows.push_back(s.q_start + pos - c.ctx_len);
      }
    }
    const int32_t drafts = c.samples && !c.seq->drafts.empty() ? c.ctx_len + c.q_len - c.seq->num_tokens() : 0;
    if (drafts > 0) {
      // The last token's row and every draft's: row i verifies draft i + 1 (and i = drafts
      // gives the bonus token). The forward stores the state after each token to roll back
      // to, or, where it cannot, the state before them is kept.
      verifies.push_back({c.seq, c.ctx_len, int32_t(batch.logit_rows.size()), drafts, store_steps});
      for (int32_t i = 0; i <= drafts; ++i) batch.logit_rows.push_back(s.q_start + s.q_len - 1 - drafts + i);
      if (store_steps) {
        batch.state_steps = cache_->state_steps();
      } else {
        cache_->checkpoint_state(*c.seq);
      }
    } else if (c.samples) {
      sample_row[ci] = int32_t(batch.logit_rows.size());
      batch.logit_rows.push_back(s.q_start + s.q_len - 1);
    }
    batch.seqs.push_back(std::move(s));
  }
  if (!batch.feed_rows.empty()) batch.feed_ids = sampler_->draw_ids(inflight_->slot);
  // Speculative decoding: the head runs over the step's rows afterwards and needs their hidden
  // states, except in a step of only multi-completion sequences (they never draft, and a head
  // KV entry they skip changes drafts only), which keeps its decode graph.
  const bool drafting = spec_ && std::any_of(so.chunks.begin(), so.chunks.end(), [](const ScheduledChunk& c) {
                          return c.seq->request->seqs.size() == 1;
                        });
  const double forward_start = drafting ? now() : 0.0;
  const Tensor& logits = drafting ? runner_->run_with_hidden(batch, cache_->caches(), hidden_)
                                  : runner_->run(batch, cache_->caches());
  if (drafting) stats_.spec_verify_seconds += now() - forward_start;
  if (!prompt_rows.empty()) take_prompt_logprobs(prompt_rows, logits);
  ++stats_.steps;
  stats_.graph_steps = runner_->graph_steps();
  stats_.computed_tokens += so.num_tokens;
  StepInFlight f;
  f.slot = next_slot_;
  next_slot_ ^= 1;
  for (size_t ci = 0; ci < so.chunks.size(); ++ci) {
    const ScheduledChunk& c = so.chunks[ci];
    Sequence& seq = *c.seq;
    Request& req = *seq.request;
    if (req.metrics.first_scheduled_time == 0) req.metrics.first_scheduled_time = now();
    const int32_t prompt_part = std::max(0, std::min(c.ctx_len + c.q_len, seq.prompt_len) - c.ctx_len);
    stats_.computed_prompt_tokens += prompt_part;
    req.metrics.num_computed_prompt_tokens += prompt_part;
    seq.num_computed += c.q_len;
    if (fed[ci]) {
      f.fed.push_back(c);
    } else if (c.ctx_len + c.q_len <= seq.num_tokens() || seq.drafts.empty()) {  // verifies: after the rollback
      cache_->on_computed(seq, c.samples);
    }
    if (sample_row[ci] >= 0) {
      const int32_t row = sample_row[ci];
      f.jobs.push_back({&seq, row});
      if (seq.index == 0 && seq.num_generated_drawn() == 0 && req.seqs.size() > 1) fork_children(seq, row, f.jobs);
    }
  }
  if (drafting) {
    f.verifies = std::move(verifies);
    f.logits = logits;
    f.chunks = so.chunks;
    f.batch = std::move(batch);
  }
  stats_.seq_steps += int64_t(f.jobs.size() + f.verifies.size());
  // The forward is queued (on CUDA the host does not wait for it): begin fills the draws'
  // structured-output masks on the host while the device computes the logits, then queues their
  // upload and the draws behind the forward.
  sampler_->begin(logits, f.jobs, f.slot);
  for (size_t i = 0; i < f.jobs.size(); ++i) {
    Sequence& seq = *f.jobs[i].seq;
    ++seq.pending_draws;
    seq.pending_draw = int32_t(i);
    f.reads_tokens = f.reads_tokens || BatchSampler::reads_tokens(seq);
  }
  if (drafting) plan_at_launch(f);  // after the draws in flight are counted
  if (draft_policy_) {
    const bool decode = std::all_of(so.chunks.begin(), so.chunks.end(), [](const ScheduledChunk& c) {
      return c.q_len == 1 && c.samples;
    });
    // A decode step launched behind another (the pipeline full): its call's time is a step's.
    if (decode && f.verifies.empty() && behind) f.decode_rows = int32_t(f.jobs.size());
    // A call that launches a prompt chunk is not timed: its time is the chunk's.
    cycle_.launched = std::none_of(so.chunks.begin(), so.chunks.end(), [](const ScheduledChunk& c) {
      return c.ctx_len < c.seq->prompt_len;
    });
  }
  return f;
}

// The raw logits are read on the host in the step that computes them (on CUDA this waits for
// the forward: only steps with such rows pay it).
void Engine::take_prompt_logprobs(const std::vector<PromptLogitsRow>& rows, const Tensor& logits) {
  const Tensor host = logits.device() == Device::kCpu ? logits : logits.to(Device::kCpu);
  const int64_t vocab = host.dim(1);
  for (const PromptLogitsRow& r : rows) {
    Sequence& seq = *r.seq;
    STRATA_CHECK(int32_t(seq.prompt_logprobs.size()) == r.pos, "engine: prompt logprobs out of order at ", r.pos);
    append_prompt_logprob(host.data<float>() + size_t(r.row) * size_t(vocab), vocab,
                          seq.tokens[size_t(r.pos) + 1], *seq.request->sampling.params.prompt_logprobs,
                          seq.prompt_logprobs, seq.prompt_top_logprobs);
  }
}

void Engine::complete_step() {
  StepInFlight f = std::move(*inflight_);
  inflight_.reset();
  const std::vector<SampleResult> results = sampler_->end(f.slot);
  for (size_t i = 0; i < f.jobs.size(); ++i) {
    Sequence& seq = *f.jobs[i].seq;
    --seq.pending_draws;
    if (seq.is_finished()) {  // it ended (a stop, an abort) after this step was launched
      ++stats_.dropped_draws;
      continue;
    }
    append_token(seq, results[i]);
    check_stop(seq, results[i].token);
  }
  if (f.spec_work) {
    if (chain_ready(f)) {
      chain_step(f);
    } else {
      verify_drafts(f);
      draft_tokens(f);
    }
  }
  if (draft_policy_) note_completed(f);
}

RequestOutput Engine::report(Request& req) {
  RequestOutput o;
  o.request_id = req.id;
  o.metrics = req.metrics;
  bool finished = true;
  Sequence& first = *req.seqs[0];
  if (first.request_wants_prompt_logprobs && !first.prompt_logprobs_reported &&
      !first.needs_prompt_logits()) {
    o.prompt_logprobs = first.prompt_logprobs;
    o.prompt_top_logprobs = first.prompt_top_logprobs;
    first.prompt_logprobs_reported = true;
  }
  for (auto& sp : req.seqs) {
    Sequence& s = *sp;
    finished = finished && s.is_finished();
    const size_t generated = size_t(std::max(0, s.num_generated()));
    const bool new_finish = s.is_finished() && !s.finish_reported;
    // Text: hold back what a stop string or an unfinished UTF-8 character may still change.
    size_t text_upto = s.text.size();
    if (!s.is_finished()) {
      size_t longest = 0;
      for (const std::string& st : req.sampling.params.stop) longest = std::max(longest, st.size());
      const size_t hold = longest > 0 ? longest - 1 : 0;
      text_upto = text_upto > hold ? text_upto - hold : 0;
      if (text_upto >= 3 && s.text.compare(text_upto - 3, 3, "\xEF\xBF\xBD") == 0) text_upto -= 3;
    }
    const bool new_text = text_upto > s.reported_text;
    if (generated == s.reported_tokens && !new_finish && !new_text) continue;
    CompletionOutput c;
    c.index = s.index;
    c.token_ids.assign(s.tokens.begin() + s.prompt_len + ptrdiff_t(s.reported_tokens),
                       s.tokens.end());
    c.logprobs = std::move(s.new_logprobs);
    c.top_logprobs = std::move(s.new_top_logprobs);
    s.new_logprobs.clear();
    s.new_top_logprobs.clear();
    if (new_text) c.text = s.text.substr(s.reported_text, text_upto - s.reported_text);
    c.finish_reason = s.finish_reason;
    c.stop_reason = s.stop_reason;
    s.reported_tokens = generated;
    s.reported_text = std::max(s.reported_text, text_upto);
    s.finish_reported = s.is_finished();
    o.outputs.push_back(std::move(c));
  }
  o.finished = finished;
  if (finished) req.finished_reported = true;
  return o;
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  const SchedulerCounters& sc = scheduler_->counters();
  s.prefix_queries = sc.prefix_queries;
  s.prefix_hits = sc.prefix_hits;
  s.preemptions = sc.preemptions;
  s.snapshots_stored = cache_->counters().snapshots_stored;
  s.snapshots_restored = cache_->counters().snapshots_restored;
  s.running = scheduler_->num_running();
  s.waiting = scheduler_->num_waiting();
  s.cache = cache_->usage();
  s.grammar_masks = sampler_->grammar_masks();
  s.grammar_mask_seconds = sampler_->grammar_mask_seconds();
  return s;
}

}  // namespace strata
