#include "strata/engine/structured_output.h"

#include <algorithm>

namespace strata {

std::shared_ptr<const StructuredOutput> StructuredOutput::make(grammar::Grammar g,
                                                            std::shared_ptr<const grammar::TokenVocabulary> vocab) {
  return make(std::make_shared<const grammar::Grammar>(std::move(g)), std::move(vocab));
}

std::shared_ptr<const StructuredOutput> StructuredOutput::make(
    std::shared_ptr<const grammar::Grammar> g, std::shared_ptr<const grammar::TokenVocabulary> vocab) {
  auto s = std::make_shared<StructuredOutput>();
  s->grammar = std::move(g);
  s->vocab = std::move(vocab);
  s->masks = std::make_shared<grammar::TokenMaskCache>(s->grammar, s->vocab);
  return s;
}

void StructuredOutput::fill_allowed(grammar::GrammarMatcher& m, size_t words, uint64_t* out) const {
  thread_local std::vector<uint64_t> mask;
  masks->fill_mask(m, &mask);
  const size_t n = std::min(words, mask.size());
  std::copy(mask.begin(), mask.begin() + ptrdiff_t(n), out);
  std::fill(out + n, out + words, 0);
}

bool StructuredOutput::is_end(int32_t token) const {
  const auto& ends = vocab->end_ids();
  return std::find(ends.begin(), ends.end(), token) != ends.end();
}

bool StructuredOutput::accept(grammar::GrammarMatcher& m, int32_t token) const {
  return token >= 0 && token < vocab->size() && m.accept_token(vocab->bytes(token));
}

}  // namespace strata
