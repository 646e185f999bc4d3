// Decoders of tokenizer.json as a per-id piece table plus a streaming state, so that decode()
// and IncrementalDecoder share one implementation. Supported: ByteLevel, ByteFallback, Fuse,
// Sequence of those (ByteFallback before ByteLevel, Fuse not before ByteLevel), and none
// (tokens joined by spaces, as HF does without a decoder).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tokenizer/unicode.h"

namespace strata::tok {

class DecodeTable {
 public:
  DecodeTable() = default;
  // token_of(id) returns the token string of id or nullptr; special(id) whether it is skipped
  // by skip_special.
  DecodeTable(const nlohmann::json& decoder, const std::string& where, int32_t n_ids,
              const std::function<const std::string*(int32_t)>& token_of,
              const std::function<bool(int32_t)>& special);

  enum Kind : uint8_t { kUnknown, kText, kByte };
  Kind kind(int32_t id) const {
    return id < 0 || size_t(id) >= kind_.size() ? kUnknown : Kind(kind_[size_t(id)]);
  }
  bool special(int32_t id) const { return special_[size_t(id)] != 0; }
  std::string_view text(int32_t id) const {
    return std::string_view(bytes_).substr(off_[size_t(id)],
                                           off_[size_t(id) + 1] - off_[size_t(id)]);
  }
  uint8_t byte(int32_t id) const { return byte_[size_t(id)]; }
  bool byte_level() const { return byte_level_; }
  bool join_space() const { return join_space_; }

 private:
  std::vector<uint8_t> kind_, byte_, special_;
  std::vector<uint32_t> off_;
  std::string bytes_;
  bool byte_level_ = false, byte_fallback_ = false, join_space_ = false;
};

// The streaming state of one decode.
class DecodeStream {
 public:
  void push(const DecodeTable& t, int32_t id, bool skip_special, std::string* out);
  void finish(const DecodeTable& t, std::string* out);
  void reset();

 private:
  void flush_group(const DecodeTable& t, std::string* out);
  std::string group_;  // pending ByteFallback bytes
  Utf8Lossy lossy_;
  bool first_ = true;
};

// ByteLevel decoding of one token: alphabet bytes when every char is in the alphabet, else the
// token's own bytes.
void byte_level_decode(std::string_view token, std::string* out);

}  // namespace strata::tok
