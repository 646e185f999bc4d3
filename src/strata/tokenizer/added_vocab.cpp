#include "strata/tokenizer/added_vocab.h"

#include <cstring>

#include "strata/tokenizer/icu.h"
#include "strata/tokenizer/unicode.h"

namespace strata::tok {

void AddedMatcher::build(std::vector<std::string> patterns,
                         std::vector<const AddedTokenSpec*> tokens) {
  patterns_ = std::move(patterns);
  tokens_ = std::move(tokens);
  nodes_.assign(1, Node{});
  std::memset(first_byte_, 0, sizeof(first_byte_));
  for (size_t p = 0; p < patterns_.size(); ++p) {
    const std::string& s = patterns_[p];
    if (s.empty()) continue;
    first_byte_[uint8_t(s[0])] = true;
    int32_t node = 0;
    for (char c : s) {
      auto b = uint8_t(c);
      int32_t child = -1;
      for (auto& [kb, kn] : nodes_[size_t(node)].kids) {
        if (kb == b) child = kn;
      }
      if (child < 0) {
        child = int32_t(nodes_.size());
        nodes_[size_t(node)].kids.emplace_back(b, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // The first of equal patterns wins, as in a leftmost-longest Aho-Corasick automaton.
    if (nodes_[size_t(node)].terminal < 0) nodes_[size_t(node)].terminal = int32_t(p);
  }
}

int AddedMatcher::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto b = uint8_t(text[i]);
    int32_t child = -1;
    for (const auto& [kb, kn] : nodes_[size_t(node)].kids) {
      if (kb == b) {
        child = kn;
        break;
      }
    }
    if (child < 0) break;
    node = child;
    if (nodes_[size_t(node)].terminal >= 0) {
      best = nodes_[size_t(node)].terminal;
      *len = i + 1 - pos;
    }
  }
  return best;
}

namespace {

// Start of the run of White_Space that ends text (regex \s*$).
size_t trailing_space_start(std::string_view text) {
  size_t p = text.size();
  while (p > 0) {
    int len;
    uint32_t cp = utf8_decode_last(text.substr(0, p), &len);
    if (!is_white_space(cp)) break;
    p -= size_t(len);
  }
  return p;
}

// Length of the run of White_Space that starts text (regex ^\s*).
size_t leading_space_len(std::string_view text) {
  size_t p = 0;
  while (p < text.size()) {
    int len;
    uint32_t cp = utf8_decode(text.data() + p, &len);
    if (!is_white_space(cp)) break;
    p += size_t(len);
  }
  return p;
}

}  // namespace

void AddedMatcher::split(std::string_view text, uint32_t base, std::vector<AddedSplit>* out) const {
  if (text.empty()) return;
  auto push = [&](size_t s, size_t e, int32_t id) {
    out->push_back(AddedSplit{base + uint32_t(s), uint32_t(e - s), id});
  };
  size_t start_offset = 0, pos = 0, n = text.size();
  while (pos < n) {
    if (!first_byte_[uint8_t(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int idx = longest_at(text, pos, &len);
    if (idx < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;
    const AddedTokenSpec& tok = *tokens_[size_t(idx)];
    if (tok.single_word) {
      bool start_space = true, stop_space = true;
      if (start > 0) {
        int l;
        start_space = !icu_is_word_char(utf8_decode_last(text.substr(0, start), &l));
      }
      if (stop < n) {
        int l;
        stop_space = !icu_is_word_char(utf8_decode(text.data() + stop, &l));
      }
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start) push(start_offset, start, -1);
    out->push_back(AddedSplit{base + uint32_t(start), uint32_t(stop - start), tok.id});
    start_offset = stop;
  }
  if (start_offset != n) push(start_offset, n, -1);
}

}  // namespace strata::tok
