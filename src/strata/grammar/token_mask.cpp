#include "strata/grammar/token_mask.h"

#include <algorithm>
#include <string_view>

#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> end_ids)
    : bytes_(std::move(token_bytes)), end_ids_(std::move(end_ids)) {
  for (int32_t id : end_ids_)
    STRATA_CHECK(id >= 0 && id < size(), "token vocabulary: end id ", id, " is outside the vocabulary");
  for (int32_t id = 0; id < size(); ++id)
    if (!bytes_[size_t(id)].empty()) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
}

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                std::vector<int32_t> end_ids) {
  std::vector<std::string> bytes(size_t(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.token_bytes(id);
  return TokenVocabulary(std::move(bytes), std::move(end_ids));
}

TokenMaskCache::TokenMaskCache(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenVocabulary> vocab, size_t max_cached_states)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)),
      max_cached_states_(std::max<size_t>(1, max_cached_states)), walk_engine_(grammar_) {}

namespace {

enum class Verdict { kConsumed, kDependent, kRefused };

// Walks the tokens of `ranks` (indexes into vocab.sorted(), ascending, so in byte order) from
// `start` as a trie: a token continues from the states of its common prefix with the one
// before, and a token under a refused prefix takes that prefix's verdict. kDependent: refused,
// but the start frame could have completed (popped to the bottom) before the failing byte.
template <class OnToken>
void trie_walk(StackEngine& engine, const StackState& start, const TokenVocabulary& vocab,
               const std::vector<int32_t>& ranks, OnToken&& on_token) {
  const std::vector<int32_t>& sorted = vocab.sorted();
  std::vector<StackState> states(1, start);
  std::vector<char> ended_before(1, start.can_end);  // the frame could end after <= k bytes
  constexpr size_t kNone = size_t(-1);
  size_t valid = 0;        // states[0..valid] hold the previous token's prefixes
  size_t dead_at = kNone;  // the previous token's walk died at this depth
  Verdict verdict = Verdict::kRefused;
  const std::string* prev = nullptr;
  for (size_t i = 0; i < ranks.size(); ++i) {
    int32_t rank = ranks[i];
    int32_t id = sorted[size_t(rank)];
    const std::string& t = vocab.bytes(id);
    size_t shared = 0;
    if (prev) {
      size_t n = std::min(prev->size(), t.size());
      while (shared < n && (*prev)[shared] == t[shared]) ++shared;
    }
    prev = &t;
    if (dead_at == kNone || shared < dead_at) {
      size_t k = std::min(shared, valid);
      dead_at = kNone;
      for (; k < t.size(); ++k) {
        if (states.size() < k + 2) {
          states.resize(k + 2);
          ended_before.resize(k + 2);
        }
        engine.advance(states[k], uint8_t(t[k]), &states[k + 1]);
        ended_before[k + 1] = ended_before[k] || states[k + 1].can_end;
        if (states[k + 1].dead()) {
          dead_at = k + 1;
          break;
        }
      }
      valid = dead_at == kNone ? t.size() : dead_at;
      if (dead_at == kNone) verdict = Verdict::kConsumed;
      else verdict = ended_before[dead_at - 1] ? Verdict::kDependent : Verdict::kRefused;
    }
    on_token(rank, id, verdict);
    if (verdict == Verdict::kRefused && dead_at != kNone && i + 1 < ranks.size()) {
      // Every later token under the refused prefix is refused too: skip them (they are
      // contiguous in byte order) by binary search.
      std::string_view prefix(t.data(), dead_at);
      auto under = [&](int32_t r) {
        return std::string_view(vocab.bytes(sorted[size_t(r)])).substr(0, dead_at) == prefix;
      };
      if (under(ranks[i + 1])) {
        auto end = std::partition_point(ranks.begin() + long(i) + 1, ranks.end(), under);
        i = size_t(end - ranks.begin()) - 1;
      }
    }
  }
}

}  // namespace

// The vocabulary walk from the top frames `chain` (positions, top first) over an unknown rest
// of the stack (see the header).
const TokenMaskCache::PositionEntry& TokenMaskCache::position_entry(const std::vector<int32_t>& chain) {
  if (auto it = positions_.find(chain); it != positions_.end()) return *it->second;
  if (all_ranks_.empty()) {
    all_ranks_.resize(vocab_->sorted().size());
    for (size_t i = 0; i < all_ranks_.size(); ++i) all_ranks_[i] = int32_t(i);
  }
  auto entry = std::make_unique<PositionEntry>();
  entry->accepted.assign(vocab_->mask_words(), 0);
  walk_engine_.clear();
  int32_t parent = kBottom;
  for (size_t i = chain.size(); i-- > 1;) parent = walk_engine_.frame(chain[i], parent);
  trie_walk(walk_engine_, walk_engine_.start(chain[0], parent), *vocab_, all_ranks_,
            [&](int32_t rank, int32_t id, Verdict v) {
              if (v == Verdict::kConsumed) entry->accepted[size_t(id) / 64] |= uint64_t(1) << (id % 64);
              else if (v == Verdict::kDependent) entry->context_dependent.push_back(rank);
            });
  walk_engine_.clear();
  ++stats_.positions_filled;
  return *(positions_[chain] = std::move(entry));
}

std::string TokenMaskCache::state_key(GrammarMatcher& m) {
  std::vector<std::vector<int32_t>> stacks;
  StackEngine& e = m.engine();
  for (int32_t top : m.state().tops) {
    std::vector<int32_t> chain;
    for (int32_t n = top; n != kBottom; n = e.parent(n)) chain.push_back(e.position(n));
    stacks.push_back(std::move(chain));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key(1, m.can_end() ? '1' : '0');
  for (const auto& s : stacks) {
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
    int32_t sep = -1;
    key.append(reinterpret_cast<const char*>(&sep), sizeof sep);
  }
  return key;
}

void TokenMaskCache::fill_mask(GrammarMatcher& m, std::vector<uint64_t>* mask) {
  STRATA_CHECK(&m.grammar() == grammar_.get(), "token mask: the matcher's grammar is not the cache's");
  std::string key = state_key(m);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = states_.find(key); it != states_.end()) {
    *mask = it->second;
    ++stats_.state_hits;
    return;
  }
  ++stats_.state_misses;
  mask->assign(vocab_->mask_words(), 0);
  std::vector<int32_t> dependent;
  // The top kContextFrames frames of each stack (top first).
  std::vector<std::vector<int32_t>> chains;
  for (int32_t top : m.state().tops) {
    std::vector<int32_t> chain;
    for (int32_t n = top; n != kBottom && chain.size() < kContextFrames; n = m.engine().parent(n))
      chain.push_back(m.engine().position(n));
    chains.push_back(std::move(chain));
  }
  std::sort(chains.begin(), chains.end());
  chains.erase(std::unique(chains.begin(), chains.end()), chains.end());
  for (const auto& chain : chains) {
    const PositionEntry& e = position_entry(chain);
    for (size_t w = 0; w < e.accepted.size(); ++w) (*mask)[w] |= e.accepted[w];
    dependent.insert(dependent.end(), e.context_dependent.begin(), e.context_dependent.end());
  }
  // The context-dependent tokens not accepted already, checked on the full state in one walk.
  std::sort(dependent.begin(), dependent.end());
  dependent.erase(std::unique(dependent.begin(), dependent.end()), dependent.end());
  const std::vector<int32_t>& sorted = vocab_->sorted();
  dependent.erase(std::remove_if(dependent.begin(), dependent.end(),
                                 [&](int32_t rank) {
                                   int32_t id = sorted[size_t(rank)];
                                   return ((*mask)[size_t(id) / 64] >> (id % 64)) & 1;
                                 }),
                  dependent.end());
  stats_.context_checks += dependent.size();
  trie_walk(m.engine(), m.state(), *vocab_, dependent, [&](int32_t, int32_t id, Verdict v) {
    if (v == Verdict::kConsumed) (*mask)[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  });
  if (m.can_end())
    for (int32_t id : vocab_->end_ids()) (*mask)[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  if (states_.size() >= max_cached_states_) states_.clear();
  states_.emplace(std::move(key), *mask);
  stats_.states_cached = states_.size();
}

TokenMaskCache::Stats TokenMaskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace strata::grammar
