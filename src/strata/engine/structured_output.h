// A structured-output constraint (issue 21, docs/GRAMMAR.md): a compiled grammar with its token
// mask cache, shared by every sequence of every request that uses it. Each sequence has its own
// GrammarMatcher (Sequence::matcher). The sampler, on the logits' device, masks the tokens that
// the matcher refuses (and the end tokens unless the grammar can end there), the engine advances
// the matcher on the drawn token and ends the sequence with "stop" once the grammar is terminated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/grammar/grammar.h"
#include "strata/grammar/matcher.h"
#include "strata/grammar/token_mask.h"

namespace strata {

struct StructuredOutput {
  std::shared_ptr<const grammar::Grammar> grammar;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;  // end ids: the model's EOS ids
  std::shared_ptr<grammar::TokenMaskCache> masks;

  static std::shared_ptr<const StructuredOutput> make(std::shared_ptr<const grammar::Grammar> g,
                                                      std::shared_ptr<const grammar::TokenVocabulary> vocab);
  static std::shared_ptr<const StructuredOutput> make(grammar::Grammar g,
                                                      std::shared_ptr<const grammar::TokenVocabulary> vocab);
  // The allowed tokens of the matcher's state as `words` 64-bit words (bit id of word id / 64);
  // ids the vocabulary does not have are refused.
  void fill_allowed(grammar::GrammarMatcher& m, size_t words, uint64_t* out) const;
  // An end token (EOS): allowed when the grammar can end, and never fed to the matcher.
  bool is_end(int32_t token) const;
  // Advances the matcher by a token that is not an end token; false (no change) when the
  // grammar refuses it or the vocabulary has no bytes for it.
  bool accept(grammar::GrammarMatcher& m, int32_t token) const;
};

}  // namespace strata
