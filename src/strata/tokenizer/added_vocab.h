// Added tokens (special or not) and their matching before pre-tokenization, as HF's
// AddedVocabulary: leftmost-longest matching, single_word / lstrip / rstrip, and separate
// passes for non-normalized (raw text) and normalized tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tokenizer/flat_map.h"

namespace strata::tok {

struct AddedTokenSpec {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// A split of the input: either an added token (id >= 0) or text to tokenize.
struct AddedSplit {
  uint32_t off, len;
  int32_t id;
};

class AddedMatcher {
 public:
  // patterns[i] is matched as-is; tokens[i] holds the flags.
  void build(std::vector<std::string> patterns, std::vector<const AddedTokenSpec*> tokens);
  bool empty() const { return patterns_.empty(); }
  // HF find_matches over text (covering all of it); offsets are relative to `base`.
  void split(std::string_view text, uint32_t base, std::vector<AddedSplit>* out) const;

 private:
  // Longest pattern matching at text[pos], or -1.
  int longest_at(std::string_view text, size_t pos, size_t* len) const;
  struct Node {
    int32_t terminal = -1;  // pattern index ending here
    std::vector<std::pair<uint8_t, int32_t>> kids;
  };
  std::vector<std::string> patterns_;
  std::vector<const AddedTokenSpec*> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace strata::tok
