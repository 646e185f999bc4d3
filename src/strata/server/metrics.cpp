#include "strata/server/metrics.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace strata::server {

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10,   20,   40,   80,  160, 640};
}

std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t b = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[b];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help,
                              const std::string& model_name) const {
  const std::string model = "model_name=\"" + model_name + "\"";
  std::ostringstream os;
  os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    os << name << "_bucket{" << model << ",le=\"" << num(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  os << name << "_bucket{" << model << ",le=\"+Inf\"} " << count_ << "\n";
  os << name << "_sum{" << model << "} " << num(sum_) << "\n"
     << name << "_count{" << model << "} " << count_ << "\n";
  return os.str();
}

Metrics::Metrics()
    : ttft_(latency_buckets()),
      tpot_(latency_buckets()),
      e2e_(latency_buckets()),
      prompt_len_(token_buckets()),
      generation_len_(token_buckets()) {}

void Metrics::on_finished(const RequestOutput& last, int64_t generated_tokens,
                          const std::vector<std::string>& finish_reasons) {
  const RequestMetrics& m = last.metrics;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& r : finish_reasons) ++finished_[r];
  prompt_tokens_ += m.num_prompt_tokens;
  generation_tokens_ += generated_tokens;
  prompt_len_.observe(double(m.num_prompt_tokens));
  generation_len_.observe(double(generated_tokens));
  if (m.first_token_time > 0) {
    ttft_.observe(m.first_token_time - m.arrival_time);
    if (generated_tokens > 1 && m.finished_time > m.first_token_time) {
      tpot_.observe((m.finished_time - m.first_token_time) / double(generated_tokens - 1));
    }
  }
  if (m.finished_time > 0) e2e_.observe(m.finished_time - m.arrival_time);
}

void Metrics::on_rejected(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_[status];
}

std::string Metrics::render(const LoopSnapshot& s, const std::string& model_name) const {
  const std::string label = "{model_name=\"" + model_name + "\"}";
  std::ostringstream os;
  auto gauge = [&](const char* name, const char* help, double v) {
    os << "# HELP strata:" << name << " " << help << "\n# TYPE strata:" << name << " gauge\n";
    os << "strata:" << name << label << " " << num(v) << "\n";
  };
  auto counter = [&](const char* name, const char* help, double v) {
    os << "# HELP strata:" << name << " " << help << "\n# TYPE strata:" << name << " counter\n";
    os << "strata:" << name << label << " " << num(v) << "\n";
  };
  const EngineStats& e = s.stats;
  const CacheUsage& c = e.cache;
  gauge("num_requests_running", "Requests in the running batch.", e.running);
  gauge("num_requests_waiting", "Requests waiting to be scheduled.", e.waiting);
  gauge("kv_cache_usage_perc", "Fraction of KV pages in use (0-1).",
        c.num_blocks ? double(c.used_blocks) / c.num_blocks : 0.0);
  gauge("kv_cache_pages_total", "KV pages in the pool.", c.num_blocks);
  gauge("kv_cache_pages_free", "KV pages free (cached prefixes included).", c.free_blocks);
  gauge("kv_cache_pages_cached", "Pages holding a reusable cached prefix.", c.cached_blocks);
  gauge("state_slots_usage_perc", "Fraction of recurrent-state slots in use (0-1).",
        c.seq_slots ? double(c.seq_slots - c.free_seq_slots) / c.seq_slots : 0.0);
  gauge("state_snapshots", "Recurrent-state snapshots held for prefix caching.", c.snapshots);
  gauge("prefix_cache_hit_rate", "Prompt tokens served from the prefix cache / looked up.",
        e.prefix_queries ? double(e.prefix_hits) / double(e.prefix_queries) : 0.0);
  counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          double(e.prefix_queries));
  counter("prefix_cache_hits_total", "Prompt tokens served from the prefix cache.",
          double(e.prefix_hits));
  counter("num_preemptions_total", "Sequences preempted (recomputed later).", double(e.preemptions));
  counter("engine_steps_total", "Engine steps run.", double(s.steps_total));
  if (!e.spec_drafted_at.empty()) {  // speculative decoding (--speculative-config), vLLM's names
    counter("spec_decode_num_drafts_total", "Sequence-steps that verified drafts.", double(e.spec_verifies));
    counter("spec_decode_num_draft_tokens_total", "Draft tokens verified.", double(e.spec_draft_tokens));
    counter("spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", double(e.spec_accepted_tokens));
    gauge("spec_decode_acceptance_rate", "Accepted / verified draft tokens since start.", e.spec_acceptance_rate());
    gauge("spec_decode_mean_acceptance_length", "Tokens a verify emits on average (accepted drafts + 1).",
          e.spec_mean_acceptance_length());
    os << "# HELP strata:spec_decode_num_accepted_tokens_per_pos_total Drafts accepted at each draft position.\n"
       << "# TYPE strata:spec_decode_num_accepted_tokens_per_pos_total counter\n";
    for (size_t i = 0; i < e.spec_accepted_at.size(); ++i) {
      os << "strata:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"" << model_name << "\",position=\"" << i
         << "\"} " << e.spec_accepted_at[i] << "\n";
    }
    os << "# HELP strata:spec_decode_num_drafts_per_pos_total Drafts verified at each draft position.\n"
       << "# TYPE strata:spec_decode_num_drafts_per_pos_total counter\n";
    for (size_t i = 0; i < e.spec_drafted_at.size(); ++i) {
      os << "strata:spec_decode_num_drafts_per_pos_total{model_name=\"" << model_name << "\",position=\"" << i
         << "\"} " << e.spec_drafted_at[i] << "\n";
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  counter("prompt_tokens_total", "Prompt tokens of finished requests.", double(prompt_tokens_));
  counter("generation_tokens_total", "Tokens generated by finished requests.",
          double(generation_tokens_));
  os << "# HELP strata:request_success_total Finished completions by finish reason.\n"
     << "# TYPE strata:request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = finished_.find(reason);
    os << "strata:request_success_total{model_name=\"" << model_name << "\",finished_reason=\""
       << reason << "\"} " << (it == finished_.end() ? 0 : it->second) << "\n";
  }
  os << "# HELP strata:request_rejected_total Requests refused before the engine, by status.\n"
     << "# TYPE strata:request_rejected_total counter\n";
  for (const auto& [status, n] : rejected_) {
    os << "strata:request_rejected_total{model_name=\"" << model_name << "\",status=\"" << status
       << "\"} " << n << "\n";
  }
  os << ttft_.render("strata:time_to_first_token_seconds", "Time to the first token.", model_name);
  os << tpot_.render("strata:time_per_output_token_seconds", "Time per output token after the first.", model_name);
  os << e2e_.render("strata:e2e_request_latency_seconds", "Arrival to finish.", model_name);
  os << prompt_len_.render("strata:request_prompt_tokens", "Prompt tokens per request.", model_name);
  os << generation_len_.render("strata:request_generation_tokens", "Generated tokens per request.", model_name);
  return os.str();
}

}  // namespace strata::server
