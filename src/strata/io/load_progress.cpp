#include "strata/io/load_progress.h"

#include <unistd.h>

#include <cstdio>

namespace strata {
namespace {

constexpr double kQuietSeconds = 1.0;      // nothing is printed before this
constexpr double kTerminalPeriod = 0.25;   // in-place updates on a terminal
constexpr double kLogPeriod = 5.0;         // one line per period into a file or pipe

}  // namespace

LoadProgress::LoadProgress(std::string what, size_t total_bytes, bool enabled)
    : what_(std::move(what)), total_(total_bytes), enabled_(enabled), terminal_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_print_(start_) {}

double LoadProgress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void LoadProgress::add(size_t bytes) {
  done_ += bytes;
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - start_).count() < kQuietSeconds) return;
  const double since = std::chrono::duration<double>(now - last_print_).count();
  if (printed_ && since < (terminal_ ? kTerminalPeriod : kLogPeriod)) return;
  last_print_ = now;
  print(false);
}

void LoadProgress::finish() {
  if (finished_) return;
  finished_ = true;
  if (enabled_ && (printed_ || seconds() >= kQuietSeconds)) print(true);
}

void LoadProgress::print(bool final_line) {
  const double s = seconds(), gb = double(done_) / 1e9, rate = s > 0 ? gb / s : 0;
  char total[32] = "";
  if (total_ > 0) std::snprintf(total, sizeof total, " / %.1f", double(total_) / 1e9);
  if (final_line) {
    std::fprintf(stderr, "%sloaded %s: %.1f GB in %.1f s, %.2f GB/s\n", terminal_ && printed_ ? "\r\033[K" : "",
                 what_.c_str(), gb, s, rate);
  } else {
    std::fprintf(stderr, "%sloading %s: %.1f%s GB, %.2f GB/s%s", terminal_ ? "\r\033[K" : "", what_.c_str(), gb,
                 total, rate, terminal_ ? "" : "\n");
  }
  std::fflush(stderr);
  printed_ = true;
}

}  // namespace strata
