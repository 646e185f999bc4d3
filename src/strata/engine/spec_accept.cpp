#include "strata/engine/spec_accept.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

int32_t draw_from(const std::vector<double>& weights, double u) {
  double total = 0;
  for (double w : weights) total += std::max(w, 0.0);
  if (!(total > 0)) return -1;
  const double stop = u * total;
  double run = 0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0)) continue;
    last = int32_t(i);  // rounding may leave the stop past the end: the last positive one
    run += weights[i];
    if (run > stop) break;
  }
  return last;
}

SpecVerdict verify_draft(const std::vector<double>& p, const std::vector<double>& q, int32_t x, double u_accept,
                         double u_resample) {
  STRATA_CHECK(p.size() == q.size() && x >= 0 && size_t(x) < p.size(), "verify_draft: bad distributions or draft");
  SpecVerdict v;
  if (u_accept * q[size_t(x)] < p[size_t(x)]) {
    v.token = x;
    v.accepted = true;
    return v;
  }
  std::vector<double> residual(p.size());
  for (size_t i = 0; i < p.size(); ++i) residual[i] = std::max(0.0, p[i] - q[i]);
  v.token = draw_from(residual, u_resample);
  if (v.token < 0) v.token = draw_from(p, u_resample);
  STRATA_CHECK(v.token >= 0, "verify_draft: the target distribution is empty");
  return v;
}

}  // namespace strata
