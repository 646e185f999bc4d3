// A tensor-parallel rank's split of a model config: checks the rank's dist::Parallel, then
// divides config fields by the ranks, refusing a field that does not divide by its name. The
// families' rank configs (qwen3_5.cpp, qwen4_exp_config.cpp, deepseek_v4.cpp) share it.
#pragma once

#include <cstdint>
#include <string>

#include "strata/core/error.h"
#include "strata/dist/communicator.h"

namespace strata::dist {

// A rank's share of n things split par.size ways (RankSplit checks that they divide).
struct Share {
  int64_t first = 0, count = 0;
};
inline Share rank_share(const Parallel& par, int64_t n) { return {par.rank * (n / par.size), n / par.size}; }

class RankSplit {
 public:
  // origin names the config file in the messages.
  RankSplit(const Parallel& par, std::string origin) : n_(par.size), origin_(std::move(origin)) {
    STRATA_CHECK(n_ >= 1 && par.rank >= 0 && par.rank < n_ && (n_ == 1 || par.comm), origin_,
                 ": tensor parallelism needs 0 <= rank < size and a communicator (rank ", par.rank, " of ", n_, ")");
  }
  int ranks() const { return n_; }
  // v / ranks, or an Error naming `field`.
  int64_t divide(int64_t v, const char* field) const {
    STRATA_CHECK(v % n_ == 0, origin_, ": field '", field, "' (", v, ") is not divisible by the ", n_,
                 " tensor-parallel ranks");
    return v / n_;
  }
  // Key-value heads: split when the ranks divide them, else (fewer heads than ranks, dividing
  // them) one replicated head per rank.
  int64_t kv_heads(int64_t kv) const {
    STRATA_CHECK(kv % n_ == 0 || n_ % kv == 0, origin_, ": field 'num_key_value_heads' (", kv,
                 ") neither divides nor is divided by the ", n_, " tensor-parallel ranks");
    return kv % n_ == 0 ? kv / n_ : 1;
  }

 private:
  int n_;
  std::string origin_;
};

}  // namespace strata::dist
