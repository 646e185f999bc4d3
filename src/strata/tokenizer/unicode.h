// UTF-8 helpers for the tokenizer: validation, decoding, lossy conversion (as Rust's
// String::from_utf8_lossy), White_Space, and the GPT-2 byte-level alphabet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::tok {

// Returns the offset of the first invalid byte, or s.size() when all of s is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);

// Length of the UTF-8 sequence starting with lead byte b (1 for invalid leads).
inline int utf8_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xe0) return 2;
  if (b < 0xf0) return 3;
  return 4;
}

// Decodes the character at p (valid UTF-8 assumed); sets *len to its byte length.
inline uint32_t utf8_decode(const char* p, int* len) {
  const auto* u = reinterpret_cast<const uint8_t*>(p);
  uint8_t b = u[0];
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  if (b < 0xe0) {
    *len = 2;
    return (uint32_t(b & 0x1f) << 6) | (u[1] & 0x3f);
  }
  if (b < 0xf0) {
    *len = 3;
    return (uint32_t(b & 0x0f) << 12) | (uint32_t(u[1] & 0x3f) << 6) | (u[2] & 0x3f);
  }
  *len = 4;
  return (uint32_t(b & 0x07) << 18) | (uint32_t(u[1] & 0x3f) << 12) | (uint32_t(u[2] & 0x3f) << 6) |
         (u[3] & 0x3f);
}

// Decodes the last character of s (valid, non-empty UTF-8 assumed).
uint32_t utf8_decode_last(std::string_view s, int* len);

void utf8_append(std::string* out, uint32_t cp);

// Unicode White_Space (Rust char::is_whitespace, regex \s).
inline bool is_white_space(uint32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0d);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// Streaming lossy UTF-8 decoding with the replacement rules of Rust's from_utf8_lossy (one
// U+FFFD per maximal invalid subpart). Bytes of a possibly incomplete character are held back
// until they complete or prove invalid; finish() turns a held-back tail into U+FFFD.
class Utf8Lossy {
 public:
  void feed(std::string_view bytes, std::string* out);
  void finish(std::string* out);
  void reset() { held_len_ = 0; }
  bool holding() const { return held_len_ > 0; }

 private:
  void feed_byte(uint8_t b, std::string* out);
  uint8_t held_[4] = {};
  int held_len_ = 0;
  int need_ = 0;  // total length of the held sequence
};

// Appends the lossy decoding of a complete byte string.
void utf8_lossy_append(std::string_view bytes, std::string* out);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
const std::array<uint32_t, 256>& byte_to_char();
// The byte for a byte-level code point, or -1 when cp is not in the alphabet.
int char_to_byte(uint32_t cp);

}  // namespace strata::tok
