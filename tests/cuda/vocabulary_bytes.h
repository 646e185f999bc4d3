// The tokens' bytes as Tokenizer::token_bytes gives them, without loading a Tokenizer (the GPU
// machine has no ICU, which the tokenizer's normalizer needs): the ByteLevel alphabet decoded,
// added tokens as their text, special ones empty. CudaStructuredOutput checks it against the
// tokenizer's where ICU is there.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/io/config.h"
#include "strata/tokenizer/decoder.h"

namespace strata::testing {

inline std::vector<std::string> vocabulary_bytes(const std::string& dir) {
  const nlohmann::json j = read_json_file(dir + "/tokenizer.json");
  std::map<int32_t, std::string> by_id;
  for (const auto& [text, id] : j.at("model").at("vocab").items()) {
    std::string b;
    tok::byte_level_decode(text, &b);
    by_id[id.get<int32_t>()] = b;
  }
  for (const auto& a : j.at("added_tokens")) {
    by_id[a.at("id").get<int32_t>()] = a.at("special").get<bool>() ? "" : a.at("content").get<std::string>();
  }
  std::vector<std::string> bytes(size_t(by_id.rbegin()->first + 1));
  for (const auto& [id, b] : by_id) bytes[size_t(id)] = b;
  return bytes;
}

}  // namespace strata::testing
