// Structured outputs under speculative decoding (docs/ENGINE.md, "Speculative decoding"): the
// grammar's part of drafting and verifying, for sequences with a matcher (Sequence::matcher).
//
// - Verify: row i is sampled under the mask of the sequence's matcher, which append_token
//   advances by each emitted token, so row i sees exactly the state after the accepted
//   d1..di: the target distribution a non-speculative run would sample from.
// - Draft: the same matcher is advanced by each draft while the sequence drafts, so draft
//   d(j+1) is picked under the state after d1..dj, and is rewound by exactly the drafts it
//   advanced when drafting ends (before the verify). Rewinding is GrammarMatcher::rollback,
//   which keeps its last states and goes back for free; a copy per drafter would copy the
//   matcher's node arena and step cache instead.
#pragma once

#include <cstdint>
#include <vector>

#include "strata/engine/sequence.h"

namespace strata {

// The tokens the sequence's grammar allows next (ids below `vocab`, bit t of word t / 64),
// written to `words`; nullptr (nothing written) when the sequence has no structured output.
const uint64_t* grammar_allow(Sequence& seq, int64_t vocab, std::vector<uint64_t>& words);

// The id of the highest allowed logit (the lowest id on a tie); -1 when no id is allowed.
int32_t masked_argmax(const float* logits, int64_t vocab, const uint64_t* allow);

// Advances a drafting sequence's grammar by its latest draft (counted in `advanced`). False
// when no draft may follow it: the draft is an end token, or the grammar is complete after it
// (only an end token could come next, and the sequence stops before it). A sequence without a
// structured output always goes on.
bool advance_draft_grammar(Sequence& seq, int32_t draft, int32_t& advanced);

// Undoes the `advanced` drafts (the state before drafting) and zeroes the count.
void rewind_draft_grammar(Sequence& seq, int32_t& advanced);

}  // namespace strata
