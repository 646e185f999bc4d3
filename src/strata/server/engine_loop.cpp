#include "strata/server/engine_loop.h"

#include <chrono>
#include <cstdio>

#include "strata/core/error.h"

namespace strata::server {

RequestStream::Status RequestStream::next(RequestOutput* out, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                    [this] { return !queue_.empty() || done_; })) {
    return kTimeout;
  }
  if (queue_.empty()) return kFinished;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return kDelta;
}

std::string RequestStream::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void RequestStream::push(RequestOutput o) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = o.finished;
    queue_.push_back(std::move(o));
  }
  cv_.notify_all();
}

void RequestStream::fail(const std::string& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    error_ = error;
    done_ = true;
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, FinishedHook on_finished)
    : engine_(std::move(engine)), on_finished_(std::move(on_finished)) {
  snapshot_.stats = engine_->stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  stop_ = true;
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, live] : live_) live.stream->fail("the server is shutting down");
}

std::shared_ptr<RequestStream> EngineLoop::submit(const std::string& id, std::vector<int32_t> prompt,
                                                  const SamplingParams& params) {
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    STRATA_CHECK(snapshot_.alive, "the engine stopped after an error: ", snapshot_.last_error);
    STRATA_CHECK(live_.emplace(id, Live{stream, 0, {}}).second, "request id '", id, "' is in use");
  }
  try {
    engine_->add_request(id, std::move(prompt), params);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
    throw;
  }
  return stream;
}

void EngineLoop::abort(const std::string& id) { engine_->abort(id); }

void EngineLoop::abort_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, live] : live_) engine_->abort(id);
}

LoopSnapshot EngineLoop::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

int64_t EngineLoop::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return int64_t(live_.size());
}

void EngineLoop::run() {
  while (!stop_) {
    if (!engine_->has_unfinished()) {
      engine_->wait_for_work(0.05);
      continue;
    }
    std::vector<RequestOutput> outs;
    try {
      outs = engine_->step();
    } catch (const std::exception& e) {
      // The engine's state is unknown after a failed step: fail everything and stop serving.
      std::fprintf(stderr, "strata serve: engine step failed: %s\n", e.what());
      std::lock_guard<std::mutex> lock(mu_);
      snapshot_.alive = false;
      snapshot_.last_error = e.what();
      for (auto& [id, live] : live_) live.stream->fail(cat("engine error: ", e.what()));
      live_.clear();
      return;
    }
    const EngineStats stats = engine_->stats();
    std::lock_guard<std::mutex> lock(mu_);
    for (RequestOutput& o : outs) {
      auto it = live_.find(o.request_id);
      if (it == live_.end()) continue;
      Live& live = it->second;
      for (const CompletionOutput& c : o.outputs) {
        live.generated += int64_t(c.token_ids.size());
        if (c.finished()) live.reasons.push_back(c.finish_reason);
      }
      const bool finished = o.finished;
      if (finished && on_finished_) on_finished_(o, live.generated, live.reasons);
      it->second.stream->push(std::move(o));
      if (finished) live_.erase(it);
    }
    snapshot_.stats = stats;
    ++snapshot_.steps_total;
  }
  // Stopping: end what is left so that the engine frees it (and its handlers return).
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, live] : live_) engine_->abort(id);
}

}  // namespace strata::server
