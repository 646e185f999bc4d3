#include "strata/tokenizer/unicode.h"

#include <cstring>

namespace strata::tok {

size_t utf8_valid_prefix(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    if (b < 0xc2 || b > 0xf4) return i;
    if (b < 0xe0) {
      if (i + 1 >= n || (p[i + 1] & 0xc0) != 0x80) return i;
      i += 2;
      continue;
    }
    if (b < 0xf0) {
      if (i + 2 >= n) return i;
      uint8_t c = p[i + 1];
      if ((c & 0xc0) != 0x80 || (b == 0xe0 && c < 0xa0) || (b == 0xed && c > 0x9f)) return i;
      if ((p[i + 2] & 0xc0) != 0x80) return i;
      i += 3;
      continue;
    }
    if (i + 3 >= n) return i;
    uint8_t c = p[i + 1];
    if ((c & 0xc0) != 0x80 || (b == 0xf0 && c < 0x90) || (b == 0xf4 && c > 0x8f)) return i;
    if ((p[i + 2] & 0xc0) != 0x80 || (p[i + 3] & 0xc0) != 0x80) return i;
    i += 4;
  }
  return n;
}

uint32_t utf8_decode_last(std::string_view s, int* len) {
  size_t i = s.size() - 1;
  while (i > 0 && (uint8_t(s[i]) & 0xc0) == 0x80) --i;
  return utf8_decode(s.data() + i, len);
}

void utf8_append(std::string* out, uint32_t cp) {
  char buf[4];
  int n;
  if (cp < 0x80) {
    buf[0] = char(cp);
    n = 1;
  } else if (cp < 0x800) {
    buf[0] = char(0xc0 | (cp >> 6));
    buf[1] = char(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    buf[0] = char(0xe0 | (cp >> 12));
    buf[1] = char(0x80 | ((cp >> 6) & 0x3f));
    buf[2] = char(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    buf[0] = char(0xf0 | (cp >> 18));
    buf[1] = char(0x80 | ((cp >> 12) & 0x3f));
    buf[2] = char(0x80 | ((cp >> 6) & 0x3f));
    buf[3] = char(0x80 | (cp & 0x3f));
    n = 4;
  }
  out->append(buf, size_t(n));
}

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// Expected total length for a lead byte: 0 when it can never start a character.
int lead_width(uint8_t b) {
  if (b < 0x80) return 1;
  if (b < 0xc2) return 0;
  if (b < 0xe0) return 2;
  if (b < 0xf0) return 3;
  if (b < 0xf5) return 4;
  return 0;
}

// Whether b may follow the held bytes as continuation number `pos` (1-based).
bool accepts(uint8_t first, int pos, uint8_t b) {
  if (pos == 1) {
    switch (first) {
      case 0xe0:
        return b >= 0xa0 && b <= 0xbf;
      case 0xed:
        return b >= 0x80 && b <= 0x9f;
      case 0xf0:
        return b >= 0x90 && b <= 0xbf;
      case 0xf4:
        return b >= 0x80 && b <= 0x8f;
      default:
        return b >= 0x80 && b <= 0xbf;
    }
  }
  return b >= 0x80 && b <= 0xbf;
}

}  // namespace

void Utf8Lossy::feed_byte(uint8_t b, std::string* out) {
  if (held_len_ > 0) {
    if (accepts(held_[0], held_len_, b)) {
      held_[held_len_++] = b;
      if (held_len_ == need_) {
        out->append(reinterpret_cast<const char*>(held_), size_t(held_len_));
        held_len_ = 0;
      }
      return;
    }
    out->append(kReplacement);
    held_len_ = 0;
  }
  int w = lead_width(b);
  if (w == 1) {
    out->push_back(char(b));
  } else if (w == 0) {
    out->append(kReplacement);
  } else {
    held_[0] = b;
    held_len_ = 1;
    need_ = w;
  }
}

void Utf8Lossy::feed(std::string_view bytes, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size(), i = 0;
  while (i < n) {
    if (held_len_ == 0) {
      // Copy the longest valid run at once.
      size_t ok = utf8_valid_prefix(std::string_view(bytes.data() + i, n - i));
      out->append(bytes.data() + i, ok);
      i += ok;
      if (i == n) break;
    }
    feed_byte(p[i++], out);
  }
}

void Utf8Lossy::finish(std::string* out) {
  if (held_len_ > 0) out->append(kReplacement);
  held_len_ = 0;
}

void utf8_lossy_append(std::string_view bytes, std::string* out) {
  Utf8Lossy d;
  d.feed(bytes, out);
  d.finish(out);
}

namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // the alphabet lies below U+0200
  ByteTables() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      to_char[size_t(b)] = printable ? uint32_t(b) : uint32_t(next++);
      to_byte[to_char[size_t(b)]] = int16_t(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

const std::array<uint32_t, 256>& byte_to_char() { return tables().to_char; }

int char_to_byte(uint32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

}  // namespace strata::tok
