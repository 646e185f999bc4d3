// The server's engine thread: one thread drives Engine::step and hands each request's deltas to
// the HTTP handler waiting for them (vLLM's AsyncLLM over its engine core, in one process).
//
//   EngineLoop loop(std::move(engine));
//   auto stream = loop.submit(id, prompt, params);   // any thread; throws Error on bad input
//   RequestOutput delta;
//   while (stream->next(&delta, 0.1) != RequestStream::kFinished) ...
//   loop.abort(id);                                  // e.g. the client went away
//
// Requests are admitted in arrival order (the engine's scheduler is first come, first served).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "strata/engine/engine.h"

namespace strata::server {

// The deltas of one request, filled by the engine thread, read by one handler thread.
class RequestStream {
 public:
  enum Status { kDelta, kTimeout, kFinished };
  // Waits up to timeout_s for the next delta. kDelta: *out holds it (its `finished` tells
  // whether it is the last); kFinished: the request ended and every delta was read.
  Status next(RequestOutput* out, double timeout_s);
  // Why the engine failed the request ("" unless it did): the engine thread caught an error.
  std::string error() const;

  void push(RequestOutput o);           // engine thread
  void fail(const std::string& error);  // engine thread

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;
  std::string error_;
};

// What the /metrics route reads: the engine's state after its last step, and each finished
// request's timings (for histograms), delivered through a callback on the engine thread.
struct LoopSnapshot {
  EngineStats stats;
  int64_t steps_total = 0;
  bool alive = true;  // false once the engine thread stopped on an error
  std::string last_error;
};

class EngineLoop {
 public:
  // The last output of a request, its generated tokens over all completions, and each
  // completion's finish reason.
  using FinishedHook = std::function<void(const RequestOutput& last, int64_t generated_tokens,
                                          const std::vector<std::string>& finish_reasons)>;

  explicit EngineLoop(std::unique_ptr<Engine> engine, FinishedHook on_finished = nullptr);
  ~EngineLoop();  // stops the thread; unfinished requests end with finish_reason "abort"
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request; throws Error (naming the field) for bad input, as Engine::add_request.
  std::shared_ptr<RequestStream> submit(const std::string& id, std::vector<int32_t> prompt,
                                        const SamplingParams& params);
  void abort(const std::string& id);
  // Aborts every request in flight (their streams end with finish_reason "abort").
  void abort_all();
  LoopSnapshot snapshot() const;
  // Requests submitted and not yet finished (handed back to their streams).
  int64_t in_flight() const;

  // Immutable facts of the engine, safe from any thread.
  const ModelInfo& model_info() const { return engine_->model_info(); }
  int64_t max_model_len() const { return engine_->max_model_len(); }
  void validate(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
    engine_->validate_request(prompt, params);
  }

 private:
  void run();

  std::unique_ptr<Engine> engine_;
  FinishedHook on_finished_;
  mutable std::mutex mu_;
  struct Live {
    std::shared_ptr<RequestStream> stream;
    int64_t generated = 0;
    std::vector<std::string> reasons;
  };
  std::unordered_map<std::string, Live> live_;
  LoopSnapshot snapshot_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace strata::server
