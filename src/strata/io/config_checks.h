// Range checks of config.json values, run once when a family parses its config, so that a bad
// value is refused at load with an Error naming the file and the field ("DIR/config.json: field
// 'text_config.num_key_value_heads': must be positive (got 0)") instead of dividing by zero,
// giving NaN logits or failing later under another name. Each returns the value it checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/io/config.h"

namespace strata {

// value > 0.
int64_t require_positive(const ConfigView& v, const std::string& key, int64_t value);
// value >= 0.
int64_t require_non_negative(const ConfigView& v, const std::string& key, int64_t value);
// lo <= value <= hi; `hi_name` names the bound in the message ("num_experts").
int64_t require_in_range(const ConfigView& v, const std::string& key, int64_t value, int64_t lo,
                         int64_t hi, const std::string& hi_name);
// value is a multiple of `divisor` (itself already checked positive), the field `divisor_key`.
void require_divisible(const ConfigView& v, const std::string& key, int64_t value,
                       const std::string& divisor_key, int64_t divisor);
// A finite number > 0 (epsilons, rope thetas, scaling factors).
double require_positive_float(const ConfigView& v, const std::string& key, double value);
// Token ids (eos_token_id, bos_token_id) inside a vocabulary of `vocab` entries.
void require_token_ids(const ConfigView& v, const std::string& key, const std::vector<int64_t>& ids,
                       int64_t vocab);

// eos_token_id (an int or a list; from `text`, else from `top`, the top level of a multimodal
// wrapper) and bos_token_id (-1 when absent), each checked to lie in the vocabulary.
struct SpecialTokenIds {
  std::vector<int64_t> eos;
  int64_t bos = -1;
};
SpecialTokenIds read_special_token_ids(const ConfigView& text, const ConfigView& top, int64_t vocab);

}  // namespace strata
