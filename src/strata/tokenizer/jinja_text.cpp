// Python str semantics over UTF-8 (see jinja_text.h).
#include "strata/tokenizer/jinja_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "strata/tokenizer/jinja_value.h"

namespace strata::jinja {

namespace {

constexpr char32_t kEscapeBase = 0xDC80;  // lenient decoding of stray bytes

// Length of the UTF-8 sequence starting at s[i], or 0 when malformed.
size_t utf8_seq_len(std::string_view s, size_t i, char32_t* cp) {
  unsigned char c = s[i];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  char32_t v;
  if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    unsigned char cc = s[i + k];
    if ((cc & 0xC0) != 0x80) return 0;
    v = (v << 6) | (cc & 0x3F);
  }
  // Overlong forms and out-of-range values are malformed; surrogates are tolerated (WTF-8).
  if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)))
    return 0;
  *cp = v;
  return n;
}

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth
// Latin (Python's full Unicode tables are not reproduced; other scripts are left unchanged).
char32_t to_lower(char32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';
    if (c == 0x178) return 0xFF;
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == (odd_upper ? 1u : 0u)) ? c + 1 : c;
  }
  if ((c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

char32_t to_upper(char32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return c;
    bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    return (c % 2 == (odd_upper ? 0u : 1u)) ? c - 1 : c;
  }
  if ((c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) || (c >= 0x430 && c <= 0x44F)) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

bool is_lower_cased(char32_t c) { return to_upper(c) != c || c == 0xDF; }
bool is_upper_cased(char32_t c) { return to_lower(c) != c; }
bool is_cased(char32_t c) { return is_lower_cased(c) || is_upper_cased(c); }

// Appends the upper case of c (U+00DF sharp s becomes "SS", as in Python).
void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {
    out += U"SS";
  } else {
    out.push_back(to_upper(c));
  }
}

std::u32string chars_of(const std::optional<std::string>& chars) {
  return chars ? decode_utf8(*chars) : std::u32string();
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_seq_len(s, i, &cp);
    if (n == 0) {
      out.push_back(kEscapeBase + static_cast<unsigned char>(s[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
    out.push_back(static_cast<char>(c - kEscapeBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool valid_utf8(std::string_view s, size_t* bad_offset) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_seq_len(s, i, &cp);
    if (n == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += n;
  }
  return true;
}

size_t count_code_points(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return decode_utf8(s).size();
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string u = decode_utf8(s);
  std::u32string set = chars_of(chars);
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fault("ValueError: empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = decode_utf8(s);
  size_t i = 0, n = u.size();
  while (true) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i >= n) break;
    if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > i && py_isspace(u[e - 1])) --e;
      out.push_back(encode_utf8(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < n && !py_isspace(u[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, -1);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) fault("ValueError: empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = decode_utf8(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (int64_t(out.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(u[b])) ++b;
        out.push_back(encode_utf8(std::u32string_view(u).substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(encode_utf8(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string u = decode_utf8(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0, n = u.size();
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < n) {
    if (is_break(u[i])) {
      size_t brk = (u[i] == '\r' && i + 1 < n && u[i + 1] == '\n') ? 2 : 1;
      size_t end = keepends ? i + brk : i;
      out.push_back(encode_utf8(std::u32string_view(u).substr(start, end - start)));
      i += brk;
      start = i;
    } else {
      ++i;
    }
  }
  if (start < n) out.push_back(encode_utf8(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    // Inserts repl before every code point and at the end, up to count times.
    std::u32string u = decode_utf8(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) {
        out.append(repl);
        ++done;
      }
      append_utf8(out, c);
      check_string_size(out.size());
    }
    if (count < 0 || done < count) out.append(repl);
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(repl);
    check_string_size(out.size());
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return int64_t(count_code_points(s.substr(0, hit)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(count_code_points(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

std::string py_upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode_utf8(s)) append_upper(out, c);
  return encode_utf8(out);
}

std::string py_lower(std::string_view s) {
  std::u32string u = decode_utf8(s);
  for (char32_t& c : u) c = to_lower(c);
  return encode_utf8(u);
}

std::string py_title(std::string_view s) {
  std::u32string out;
  bool prev_cased = false;
  for (char32_t c : decode_utf8(s)) {
    if (prev_cased) {
      out.push_back(to_lower(c));
    } else {
      append_upper(out, c);
    }
    prev_cased = is_cased(c);
  }
  return encode_utf8(out);
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = decode_utf8(s), out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      append_upper(out, u[i]);
    } else {
      out.push_back(to_lower(u[i]));
    }
  }
  return encode_utf8(out);
}

std::string py_swapcase(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode_utf8(s)) {
    if (is_upper_cased(c)) {
      out.push_back(to_lower(c));
    } else if (is_lower_cased(c)) {
      append_upper(out, c);
    } else {
      out.push_back(c);
    }
  }
  return encode_utf8(out);
}

bool py_islower(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode_utf8(s)) {
    if (is_upper_cased(c)) return false;
    cased |= is_lower_cased(c);
  }
  return cased;
}

bool py_isupper(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode_utf8(s)) {
    if (is_lower_cased(c)) return false;
    cased |= is_upper_cased(c);
  }
  return cased;
}

std::string py_repr_str(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : decode_utf8(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0) || c == 0xAD) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
      std::snprintf(buf, sizeof buf, "\\udc%02x", unsigned(c - kEscapeBase));
      out += buf;
    } else if ((c >= 0xD800 && c <= 0xDFFF) || c == 0x2028 || c == 0x2029) {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp10 = std::stoi(sci.substr(e + 1));
  int decpt = exp10 + 1;  // position of the decimal point relative to the digits
  int nd = int(digits.size());
  std::string out = sign;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (decpt <= 0) {
    out += "0." + std::string(size_t(-decpt), '0') + digits;
  } else if (decpt < nd) {
    out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
  } else {
    out += digits + std::string(size_t(decpt - nd), '0') + ".0";
  }
  return out;
}

std::string json_escape_str(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[16];
  auto u16 = [&](unsigned v) {
    std::snprintf(buf, sizeof buf, "\\u%04x", v);
    out += buf;
  };
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF) {
          if (ensure_ascii) {
            u16(unsigned(c));
          } else {
            append_utf8(out, c);
          }
        } else if (c < 0x20) {
          u16(unsigned(c));
        } else if (ensure_ascii && c >= 0x80) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            u16(0xD800 + unsigned(v >> 10));
            u16(0xDC00 + unsigned(v & 0x3FF));
          } else {
            u16(unsigned(c));
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += "\"";
  return out;
}

bool decode_string_escapes(std::string_view body, std::string* out, std::string* error) {
  out->clear();
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < body.size();) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out->push_back(c);
      ++i;
      continue;
    }
    char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;
      case '\\': out->push_back('\\'); break;
      case '\'': out->push_back('\''); break;
      case '"': out->push_back('"'); break;
      case 'a': out->push_back('\a'); break;
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'v': out->push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          int h = i + k < body.size() ? hex(body[i + k]) : -1;
          if (h < 0) {
            *error = std::string("truncated \\") + e + " escape";
            return false;
          }
          v = v * 16 + uint32_t(h);
        }
        if (v > 0x10FFFF) {
          *error = "illegal Unicode character";
          return false;
        }
        append_utf8(*out, char32_t(v));
        i += n;
        break;
      }
      case 'N': *error = "\\N{...} escapes are not supported"; return false;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = uint32_t(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k)
            v = v * 8 + uint32_t(body[i++] - '0');
          append_utf8(*out, char32_t(v));
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // jinja escapes non-ASCII first (backslashreplace): "\é" reads as "\" + "xe9".
          char32_t cp;
          size_t n = utf8_seq_len(body, i - 1, &cp);
          if (n == 0) cp = kEscapeBase + static_cast<unsigned char>(e), n = 1;
          char buf[16];
          if (cp < 0x100) {
            std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
          } else if (cp < 0x10000) {
            std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
          } else {
            std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
          }
          out->push_back('\\');  // the pair "\\" + the rest of the escape, read literally
          out->append(buf + 1);
          i += n - 1;
        } else {
          out->push_back('\\');
          out->push_back(e);
        }
    }
  }
  return true;
}

std::optional<int64_t> parse_py_int(std::string_view s, int base) {
  std::string t = py_strip(s, std::nullopt, true, true);
  if (t.empty()) return std::nullopt;
  bool neg = false;
  size_t i = 0;
  if (t[0] == '+' || t[0] == '-') neg = t[i++] == '-';
  if (base == 16 && t.size() > i + 1 && t[i] == '0' && (t[i + 1] == 'x' || t[i + 1] == 'X')) i += 2;
  int64_t v = 0;
  bool any = false, prev_us = true;
  for (; i < t.size(); ++i) {
    char c = t[i];
    if (c == '_') {
      if (prev_us) return std::nullopt;
      prev_us = true;
      continue;
    }
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 10
            : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                     : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, int64_t(base), &v) || __builtin_add_overflow(v, d, &v))
      return std::nullopt;
    any = true;
    prev_us = false;
  }
  if (!any || prev_us) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_py_float(std::string_view s) {
  std::string t = py_strip(s, std::nullopt, true, true);
  std::string low = py_lower(t);
  std::string_view body = low;
  bool neg = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return neg ? -INFINITY : INFINITY;
  if (body == "nan") return NAN;
  std::string clean;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= body.size() || !isdigit(body[i - 1]) || !isdigit(body[i + 1]))
        return std::nullopt;
      continue;
    }
    if (!(isdigit(c) || c == '.' || c == 'e' || c == '+' || c == '-')) return std::nullopt;
    clean.push_back(c);
  }
  if (clean.empty()) return std::nullopt;
  double v;
  auto res = std::from_chars(clean.data(), clean.data() + clean.size(), v);
  if (res.ec != std::errc() || res.ptr != clean.data() + clean.size()) return std::nullopt;
  return neg ? -v : v;
}

}  // namespace strata::jinja
