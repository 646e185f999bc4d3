#include "strata/grammar/token_mask.h"

#include <algorithm>

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
  common_prefix_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes_[size_t(sorted_[i - 1])];
    const std::string& b = bytes_[size_t(sorted_[i])];
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n] && n < 0xFFFF) ++n;
    common_prefix_[i] = uint16_t(n);
  }
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

// The vocabulary walk from a frame at `position` over an unknown parent (see the header).
const TokenMaskCache::PositionEntry& TokenMaskCache::position_entry(int32_t position) {
  if (auto it = positions_.find(position); it != positions_.end()) return *it->second;
  auto entry = std::make_unique<PositionEntry>();
  entry->accepted.assign(vocab_->mask_words(), 0);
  walk_engine_.clear();
  const std::vector<int32_t>& sorted = vocab_->sorted();
  const std::vector<uint16_t>& common = vocab_->common_prefix();
  std::vector<StackState> states(1, walk_engine_.start(position, kBottom));
  // ended_before[k]: the frame could complete after some j <= k bytes.
  std::vector<char> ended_before(1, states[0].can_end);
  constexpr size_t kNone = size_t(-1);
  size_t valid = 0;        // states[0..valid] hold the previous token's prefixes
  size_t dead_at = kNone;  // the previous token's walk died at this depth
  enum { kAccepted, kDependent, kRejected } verdict = kRejected;
  for (size_t i = 0; i < sorted.size(); ++i) {
    int32_t id = sorted[i];
    const std::string& t = vocab_->bytes(id);
    size_t shared = i == 0 ? 0 : common[i];
    if (dead_at == kNone || shared < dead_at) {
      size_t k = std::min(shared, valid);
      dead_at = kNone;
      for (; k < t.size(); ++k) {
        if (states.size() < k + 2) {
          states.resize(k + 2);
          ended_before.resize(k + 2);
        }
        walk_engine_.advance(states[k], uint8_t(t[k]), &states[k + 1]);
        ended_before[k + 1] = ended_before[k] || states[k + 1].can_end;
        if (states[k + 1].dead()) {
          dead_at = k + 1;
          break;
        }
      }
      valid = dead_at == kNone ? t.size() : dead_at;
      if (dead_at == kNone) verdict = kAccepted;
      else verdict = ended_before[dead_at - 1] ? kDependent : kRejected;
    }
    // else: t shares the refused prefix of the previous token, so the same verdict.
    if (verdict == kAccepted) entry->accepted[size_t(id) / 64] |= uint64_t(1) << (id % 64);
    else if (verdict == kDependent) entry->context_dependent.push_back(id);
  }
  walk_engine_.clear();
  ++stats_.positions_filled;
  return *(positions_[position] = std::move(entry));
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
  std::vector<int32_t> seen_positions;
  for (int32_t top : m.state().tops) seen_positions.push_back(m.engine().position(top));
  std::sort(seen_positions.begin(), seen_positions.end());
  seen_positions.erase(std::unique(seen_positions.begin(), seen_positions.end()), seen_positions.end());
  for (int32_t p : seen_positions) {
    const PositionEntry& e = position_entry(p);
    for (size_t w = 0; w < e.accepted.size(); ++w) (*mask)[w] |= e.accepted[w];
    dependent.insert(dependent.end(), e.context_dependent.begin(), e.context_dependent.end());
  }
  std::sort(dependent.begin(), dependent.end());
  dependent.erase(std::unique(dependent.begin(), dependent.end()), dependent.end());
  for (int32_t id : dependent) {
    uint64_t bit = uint64_t(1) << (id % 64);
    if ((*mask)[size_t(id) / 64] & bit) continue;
    ++stats_.context_checks;
    if (m.can_accept(vocab_->bytes(id))) (*mask)[size_t(id) / 64] |= bit;
  }
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
