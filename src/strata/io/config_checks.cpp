#include "strata/io/config_checks.h"

#include <cmath>

#include "strata/core/error.h"

namespace strata {

int64_t require_positive(const ConfigView& v, const std::string& key, int64_t value) {
  if (value <= 0) v.fail_field(key, cat("must be positive (got ", value, ")"));
  return value;
}

int64_t require_non_negative(const ConfigView& v, const std::string& key, int64_t value) {
  if (value < 0) v.fail_field(key, cat("must not be negative (got ", value, ")"));
  return value;
}

int64_t require_in_range(const ConfigView& v, const std::string& key, int64_t value, int64_t lo,
                         int64_t hi, const std::string& hi_name) {
  if (value < lo || value > hi) {
    v.fail_field(key, cat("must be in [", lo, ", ", hi_name, " = ", hi, "] (got ", value, ")"));
  }
  return value;
}

void require_divisible(const ConfigView& v, const std::string& key, int64_t value,
                       const std::string& divisor_key, int64_t divisor) {
  if (value % divisor) {
    v.fail_field(key, cat("must be divisible by ", divisor_key, " (got ", value, " and ", divisor, ")"));
  }
}

double require_positive_float(const ConfigView& v, const std::string& key, double value) {
  if (!std::isfinite(value) || !(value > 0)) {
    v.fail_field(key, cat("must be a finite number > 0 (got ", value, ")"));
  }
  return value;
}

void require_token_ids(const ConfigView& v, const std::string& key, const std::vector<int64_t>& ids,
                       int64_t vocab) {
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab) {
      v.fail_field(key, cat(id, " is outside the vocabulary (vocab_size ", vocab, ")"));
    }
  }
}

SpecialTokenIds read_special_token_ids(const ConfigView& text, const ConfigView& top, int64_t vocab) {
  SpecialTokenIds ids;
  ids.eos = text.get_int_or_list("eos_token_id");
  require_token_ids(text, "eos_token_id", ids.eos, vocab);
  if (ids.eos.empty()) {
    ids.eos = top.get_int_or_list("eos_token_id");
    require_token_ids(top, "eos_token_id", ids.eos, vocab);
  }
  if (text.has("bos_token_id")) {
    ids.bos = text.get_int("bos_token_id");
    require_token_ids(text, "bos_token_id", {ids.bos}, vocab);
  }
  return ids;
}

}  // namespace strata
