// The progress line of a checkpoint load on stderr:
//   loading /models/x: 7.8 / 15.5 GB, 3.1 GB/s
// rewritten in place on a terminal (every quarter second), a new line every 5 s otherwise, and a
// closing "loaded /models/x: 15.5 GB in 5.0 s, 3.1 GB/s". Loads shorter than a second (tests,
// tiny models) print nothing. One thread (the loader's) calls it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace strata {

class LoadProgress {
 public:
  // `total_bytes`: what the load will read (0: unknown, no total shown); `enabled` false: silent.
  LoadProgress(std::string what, size_t total_bytes, bool enabled);
  // `bytes` more were read.
  void add(size_t bytes);
  // The closing line (when the load took a second or more); later calls do nothing.
  void finish();
  size_t bytes() const { return done_; }
  double seconds() const;

 private:
  void print(bool final_line);

  std::string what_;
  size_t total_ = 0, done_ = 0;
  bool enabled_ = false, terminal_ = false, printed_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_print_;
};

}  // namespace strata
