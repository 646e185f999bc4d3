// Mean, standard deviation and percentiles of a list of latencies, as `vllm bench` reports them
// (numpy.percentile's default: linear interpolation between the closest ranks); zeros when empty.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::cli {

struct LatencyStats {
  double mean = 0, median = 0, std = 0, p90 = 0, p99 = 0;
};

inline LatencyStats latency_stats(std::vector<double> v) {
  LatencyStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / double(v.size()));
  auto pct = [&](double p) {
    const double rank = p / 100.0 * double(v.size() - 1);
    const size_t lo = size_t(rank), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (rank - double(lo)) * (v[hi] - v[lo]);
  };
  s.median = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  return s;
}

}  // namespace strata::cli
