// Pre-tokenizers of tokenizer.json: Split (regex or string, all delimiter behaviors, invert),
// Digits, ByteLevel (add_prefix_space, use_regex), Whitespace, WhitespaceSplit and Sequence.
// ByteLevel must come last: its byte -> alphabet mapping is left to the BPE model, which works
// on raw bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace strata::tok {

struct Span {
  uint32_t off, len;
};

class PreTokenizer {
 public:
  PreTokenizer();
  // Parses a "pre_tokenizer" value (null allowed); `where` prefixes error messages.
  PreTokenizer(const nlohmann::json& j, const std::string& where);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // True when the chain ends with ByteLevel (words are then raw bytes to be byte-mapped).
  bool byte_level() const { return byte_level_; }

  // Splits the piece `in` of *pool into words, appended to *out as spans of *pool. The pool may
  // grow (ByteLevel's add_prefix_space writes new text at its end). Empty words are dropped.
  void run(std::string* pool, Span in, std::vector<Span>* out) const;

  struct Stage;

 private:
  void parse(const nlohmann::json& j, const std::string& where);
  std::vector<std::unique_ptr<Stage>> stages_;
  bool byte_level_ = false;
};

}  // namespace strata::tok
