// Per-step token masks over a vocabulary, with the adaptive cache of xgrammar:
//
// - per chain of top frames (the positions of a stack's kContextFrames top frames), the
//   vocabulary is walked once in sorted order (a trie walk: tokens sharing a prefix share its
//   states, and a refused prefix skips every token under it) from those frames over an unknown
//   rest of the stack. A token is accepted when its bytes are consumed inside the frames
//   (whatever is below), rejected when they fail inside them without the frames ever
//   completing, and context-dependent when the frames can complete before the token's end
//   (what follows depends on the stack below);
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
  // The ids that have bytes, in byte order (a token's rank is its index here).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  size_t mask_words() const { return (bytes_.size() + 63) / 64; }

 private:
  std::vector<std::string> bytes_;
  std::vector<int32_t> end_ids_, sorted_;
};

class TokenMaskCache {
 public:
  // How many frames from the top of a stack key a precomputed entry: a token that stays inside
  // them is decided once; one that would pop below them is checked on the full state.
  static constexpr size_t kContextFrames = 3;

  TokenMaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab,
                 size_t max_cached_states = 1024);

  // The mask (vocab.mask_words() words, bit id of word id / 64) of the tokens the matcher
  // accepts next. Thread-safe; the matcher must use this cache's grammar.
  void fill_mask(GrammarMatcher& matcher, std::vector<uint64_t>* mask);

  struct Stats {
    size_t positions_filled = 0;   // vocabulary walks done (one per distinct top-frame chain)
    size_t states_cached = 0;      // per-state masks held
    size_t state_hits = 0, state_misses = 0;
    size_t context_checks = 0;     // context-dependent tokens checked on full states
  };
  Stats stats() const;

 private:
  struct PositionEntry {
    std::vector<uint64_t> accepted;
    std::vector<int32_t> context_dependent;  // ranks in vocab.sorted()
  };
  const PositionEntry& position_entry(const std::vector<int32_t>& chain);
  static std::string state_key(GrammarMatcher& m);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t max_cached_states_;
  StackEngine walk_engine_;
  std::vector<int32_t> all_ranks_;  // 0 .. vocab.sorted().size() - 1
  mutable std::mutex mu_;
  struct ChainHash {
    size_t operator()(const std::vector<int32_t>& c) const {
      size_t h = 1469598103934665603ull;
      for (int32_t p : c) h = (h ^ uint32_t(p)) * 1099511628211ull;
      return h;
    }
  };
  std::unordered_map<std::vector<int32_t>, std::unique_ptr<PositionEntry>, ChainHash> positions_;
  std::unordered_map<std::string, std::vector<uint64_t>> states_;
  Stats stats_;
};

}  // namespace strata::grammar
