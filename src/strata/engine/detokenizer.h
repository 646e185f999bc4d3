// What the engine needs of a tokenizer: ids to text, for stop strings and text output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // The text of a whole id sequence. Called from the thread that drives Engine::step.
  virtual std::string decode(const std::vector<int32_t>& ids) = 0;
};

}  // namespace strata
