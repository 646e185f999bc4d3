// The acceptance rule of speculative sampling (Leviathan et al. 2023; Chen et al. 2023), which
// leaves the target's distribution exactly as it is: a draft x drawn from the draft's q is
// accepted with probability min(1, p(x) / q(x)); on rejection the token is drawn from
// norm(max(0, p - q)); after the last accepted draft the bonus token is drawn from p.
// Distributions are over the vocabulary and sum to 1; uniforms are in [0, 1).
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

// The first id, in id order, at which the running weight exceeds u times the total weight
// (weights need not be normalised; zero weights are never chosen). -1 when all are zero.
int32_t draw_from(const std::vector<double>& weights, double u);

struct SpecVerdict {
  int32_t token = 0;      // the draft when accepted, else the draw from the residual
  bool accepted = false;
};

// One verify position: draft `x` (drawn from q) against the target's p. `u_accept` decides
// acceptance (accepted iff u_accept * q(x) < p(x)); `u_resample` draws the replacement. When
// the residual is empty (p equals q up to rounding) the replacement is drawn from p.
SpecVerdict verify_draft(const std::vector<double>& p, const std::vector<double>& q, int32_t x, double u_accept,
                         double u_resample);

}  // namespace strata
