// What the engine needs of a tokenizer: ids to text, for stop strings and text output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/tokenizer/tokenizer.h"

namespace strata {

class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // The text of a whole id sequence. Called from the thread that drives Engine::step.
  virtual std::string decode(const std::vector<int32_t>& ids) = 0;
};

// A model's tokenizer as the engine's Detokenizer: the decode of all ids with special tokens
// skipped (vLLM's default). The tokenizer must outlive it.
class TokenizerDetokenizer : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string decode(const std::vector<int32_t>& ids) override { return tokenizer_.decode(ids, true); }

 private:
  const Tokenizer& tokenizer_;
};

}  // namespace strata
