// Per-step token masks over a vocabulary, with the adaptive cache of xgrammar:
//
// - per grammar position (the position of a stack top), the vocabulary is walked once in sorted
//   order (a trie walk: tokens sharing a prefix share its states, and a refused prefix skips
//   every token under it) from a frame with an unknown parent. A token is accepted when its
//   bytes are consumed inside the frame (whatever the context), rejected when they fail inside
//   it without the frame ever completing, and context-dependent when the frame can complete
//   before the token's end (what follows depends on the stack below);
// - per matcher state (its stacks, by content), the mask: the union of its tops' accepted
//   sets, plus the context-dependent tokens that the full state accepts (checked one by one),
//   plus the end tokens when the grammar can end. A state seen before costs a copy.
//
//   auto vocab = std::make_shared<TokenVocabulary>(TokenVocabulary::from_tokenizer(tok, {eos}));
//   TokenMaskCache cache(grammar, vocab);
//   std::vector<uint64_t> mask;
//   cache.fill_mask(matcher, &mask);   // bit id set: token id may come next
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "strata/grammar/matcher.h"

namespace strata {
class Tokenizer;
}

namespace strata::grammar {

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes of each token; "" for ids never allowed by a grammar (special
  // tokens). end_ids: allowed exactly when the grammar can end (EOS).
  TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_ids);
  // Every token's bytes (Tokenizer::token_bytes), special tokens excluded.
  static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer, std::vector<int32_t> end_ids);

  int32_t size() const { return int32_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  // Ids with bytes, in byte order, and each one's common prefix length with the one before.
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint16_t>& common_prefix() const { return common_prefix_; }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_ids_, sorted_;
  std::vector<uint16_t> common_prefix_;
};

class TokenMaskCache {
 public:
  TokenMaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab,
                 size_t max_cached_states = 1024);

  // The mask (vocab.mask_words() words, bit id of word id / 64) of the tokens the matcher
  // accepts next. Thread-safe; the matcher must use this cache's grammar.
  void fill_mask(GrammarMatcher& matcher, std::vector<uint64_t>* mask);

  struct Stats {
    size_t positions_filled = 0;   // per-position walks done
    size_t states_cached = 0;      // per-state masks held
    size_t state_hits = 0, state_misses = 0;
    size_t context_checks = 0;     // context-dependent tokens checked on full states
  };
  Stats stats() const;

 private:
  struct PositionEntry {
    std::vector<uint64_t> accepted;
    std::vector<int32_t> context_dependent;
  };
  const PositionEntry& position_entry(int32_t position);
  static std::string state_key(GrammarMatcher& m);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_cached_states_;
  StackEngine walk_engine_;
  mutable std::mutex mu_;
  std::unordered_map<int32_t, std::unique_ptr<PositionEntry>> positions_;
  std::unordered_map<std::string, std::vector<uint64_t>> states_;
  Stats stats_;
};

}  // namespace strata::grammar
