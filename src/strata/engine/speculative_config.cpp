#include "strata/engine/speculative_config.h"

#include <nlohmann/json.hpp>

#include "strata/core/error.h"

namespace strata {

SpeculativeConfig parse_speculative_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("--speculative-config: not JSON (", e.what(), "): '", text, "'");
  }
  STRATA_CHECK(j.is_object(), "--speculative-config: expected a JSON object such as "
               "{\"method\": \"mtp\", \"num_speculative_tokens\": 2}, got '", text, "'");
  SpeculativeConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "method") {
      STRATA_CHECK(it->is_string(), "--speculative-config: field 'method' must be a string");
      c.method = it->get<std::string>();
      STRATA_CHECK(c.method == "mtp", "--speculative-config: field 'method': only \"mtp\" (the model's own "
                   "multi-token-prediction head) is supported, got \"", c.method, "\"");
    } else if (key == "num_speculative_tokens") {
      STRATA_CHECK(it->is_number_integer(), "--speculative-config: field 'num_speculative_tokens' must be an integer");
      const int64_t k = it->get<int64_t>();
      STRATA_CHECK(k >= 1 && k <= kMaxSpeculativeTokens, "--speculative-config: field 'num_speculative_tokens' must be in [1, ",
                   kMaxSpeculativeTokens, "], got ", k);
      c.num_speculative_tokens = int32_t(k);
    } else if (key == "draft_length") {
      STRATA_CHECK(it->is_string(), "--speculative-config: field 'draft_length' must be a string (\"fixed\" or "
                   "\"dynamic\")");
      const std::string mode = it->get<std::string>();
      STRATA_CHECK(mode == "fixed" || mode == "dynamic", "--speculative-config: field 'draft_length' must be "
                   "\"fixed\" or \"dynamic\", got \"", mode, "\"");
      c.dynamic = mode == "dynamic";
    } else {
      fail("--speculative-config: unknown field '", key, "' (known: method, num_speculative_tokens, draft_length)");
    }
  }
  STRATA_CHECK(!c.method.empty(), "--speculative-config: field 'method' is missing (\"mtp\")");
  STRATA_CHECK(c.num_speculative_tokens > 0, "--speculative-config: field 'num_speculative_tokens' is missing");
  return c;
}

}  // namespace strata
