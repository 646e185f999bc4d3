#include "strata/engine/spec_grammar.h"

#include "strata/core/error.h"
#include "strata/engine/structured_output.h"

namespace strata {

const uint64_t* grammar_allow(Sequence& seq, int64_t vocab, std::vector<uint64_t>& words) {
  if (!seq.matcher) return nullptr;
  words.resize(size_t((vocab + 63) / 64));
  seq.request->sampling.params.structured->fill_allowed(*seq.matcher, words.size(), words.data());
  return words.data();
}

int32_t masked_argmax(const float* logits, int64_t vocab, const uint64_t* allow) {
  int32_t best = -1;
  for (int64_t t = 0; t < vocab; ++t) {
    if (!((allow[t >> 6] >> (t & 63)) & 1)) continue;
    if (best < 0 || logits[t] > logits[best]) best = int32_t(t);
  }
  return best;
}

bool advance_draft_grammar(Sequence& seq, int32_t draft, int32_t& advanced) {
  if (!seq.matcher) return true;
  const StructuredOutput& so = *seq.request->sampling.params.structured;
  if (so.is_end(draft)) return false;
  STRATA_CHECK(so.accept(*seq.matcher, draft), "speculative decoding: the grammar refused draft ", draft,
               ", drawn under its own mask");
  ++advanced;
  return !seq.matcher->is_terminated();
}

void rewind_draft_grammar(Sequence& seq, int32_t& advanced) {
  if (advanced == 0) return;
  STRATA_CHECK(seq.matcher && advanced <= seq.matcher->rollback_depth(),
               "speculative decoding: cannot rewind ", advanced, " drafts of the grammar");
  seq.matcher->rollback(advanced);
  advanced = 0;
}

}  // namespace strata
