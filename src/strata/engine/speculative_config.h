// SpeculativeConfig: `--speculative-config '{"method": "mtp", "num_speculative_tokens": K}'`
// (vLLM's flag). Only the model's own multi-token-prediction head ("mtp") drafts so far.
// strata's own field "draft_length": "fixed" (the default: K drafts a sequence and step, vLLM's
// behaviour) or "dynamic" (each sequence's k in [0, K] from its recent acceptance, and steps
// without drafts when speculation costs more than it saves: draft_length.h).
#pragma once

#include <cstdint>
#include <string>

#include "strata/engine/draft_length.h"

namespace strata {

struct SpeculativeConfig {
  std::string method;                  // "mtp"; empty: no speculation
  int32_t num_speculative_tokens = 0;  // K draft tokens per sequence and step; 0: off
  bool dynamic = false;                // "draft_length": "dynamic"
  DraftCosts costs;                    // the dynamic policy's cost model (not a flag: tests set it)
  // Dynamic: the most positions a sequence's head forward waits for a step where it drafts
  // (Sequence::head_pending); 0 runs the head every step (not a flag: tests compare the two).
  // 15: a catch-up of every sequence's kept rows and its new one is 16 tokens a sequence, the most
  // a head graph takes (DecodeGraphs::kMaxTokensPerSeq).
  int32_t head_defer_max = 15;
  // Dynamic: the policy prices drafts by the engine's measured step times where it has them
  // (StepCostMeter) and as cheap elsewhere (a verify row 0.1 of a decode step's: tried, then
  // measured); false: by `costs` always (not a flag: tests that need the policy's choices
  // reproducible set it).
  bool measure_costs = true;
  bool enabled() const { return num_speculative_tokens > 0; }
};

// Parses the flag's JSON object; an Error naming the field on anything else (unknown fields
// included, so that a misspelt one is not silently ignored).
SpeculativeConfig parse_speculative_config(const std::string& json);

// The largest K accepted (each draft is one head forward per step).
constexpr int32_t kMaxSpeculativeTokens = 16;

}  // namespace strata
