// Per-op GPU time for the roofline benchmark's breakdown. While profiling is on, each
// outermost CUDA op records an event after queuing its work; an op's time is the span from the
// previous op's event to its own. Run with the stream held busy (stall_stream) so the host
// queues the whole forward ahead of the GPU: the spans are then GPU time, not launch gaps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::ops::cuda {

class OpTimer {
 public:
  // `what` names the op; a and b (when non-zero) tell shapes apart, e.g. a weight's N x K.
  explicit OpTimer(const char* what, int64_t a = 0, int64_t b = 0);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  bool outer_ = false;
  const char* what_;
  int64_t a_, b_;
};

struct OpTime {
  std::string name;
  int64_t calls = 0;
  double ms = 0;
};

// Starts collecting (records the first event). Not allowed during graph capture.
void profile_begin();
// Stops, waits for the GPU, and returns the time per op name, largest first.
std::vector<OpTime> profile_end();
// Queues a kernel that keeps the GPU busy for about `ms` milliseconds.
void stall_stream(double ms);

}  // namespace strata::ops::cuda
