// Regular expression (a PCRE2 subset, UTF mode, matched against the whole text) -> a GBNF
// expression -> Grammar. Supported: literals, escapes (\d \w \s \D \W \S as ASCII classes,
// \n \t \r \f \v \e \xHH \x{H..} and escaped punctuation), ., classes with ranges and negation,
// groups (capturing, (?:...), named), alternation, ? * + {m} {m,} {m,n} (lazy forms too), and
// ^ / $ at the ends. Refused by name: backreferences, lookaround, word boundaries, inline flags,
// possessive quantifiers, other anchors and escapes.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include "strata/core/error.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {
namespace {

using Ranges = std::vector<CodepointRange>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

Ranges complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  uint32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::string gbnf_class(const Ranges& r, bool negated) {
  std::string out = negated ? "[^" : "[";
  char buf[32];
  for (auto [lo, hi] : r) {
    if (lo == hi) std::snprintf(buf, sizeof buf, "\\U%08X", lo);
    else std::snprintf(buf, sizeof buf, "\\U%08X-\\U%08X", lo, hi);
    out += buf;
  }
  if (r.empty() && !negated) fail("regex: empty character class");
  return out + "]";
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view p) : s_(p) {}

  std::string parse() {
    if (!s_.empty() && s_[0] == '^') ++pos_;
    std::string e = alternation(0);
    if (pos_ < s_.size()) {
      if (s_[pos_] == ')') error("unmatched ')'");
      error("unexpected '", s_[pos_], "'");
    }
    return e;
  }

 private:
  template <class... A>
  [[noreturn]] void error(A&&... a) {
    fail("regex: position ", pos_, ": ", std::forward<A>(a)...);
  }

  bool at_end_anchor() const { return pos_ + 1 == s_.size() && s_[pos_] == '$'; }

  std::string alternation(int depth) {
    if (depth > 200) error("groups nested too deeply");
    std::string out = "(" + sequence(depth);
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      out += " | " + sequence(depth);
    }
    return out + ")";
  }

  std::string sequence(int depth) {
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      if (at_end_anchor()) {
        if (depth > 0) error("'$' inside a group is not supported (only at the end)");
        ++pos_;
        break;
      }
      std::string atom = this->atom(depth);
      atom = quantified(atom);
      out += (out.empty() ? "" : " ") + atom;
    }
    return out.empty() ? "\"\"" : out;
  }

  bool parse_int(size_t* p, int64_t* v) {
    size_t start = *p;
    *v = 0;
    while (*p < s_.size() && std::isdigit(static_cast<unsigned char>(s_[*p]))) {
      *v = std::min<int64_t>(*v * 10 + (s_[*p] - '0'), 1000000);
      ++*p;
    }
    return *p > start;
  }

  // {m}, {m,}, {m,n} at pos_; false (and pos_ unchanged) when it is a literal '{'.
  bool counted(int64_t* lo, int64_t* hi) {
    size_t p = pos_ + 1;
    if (!parse_int(&p, lo)) return false;
    *hi = *lo;
    if (p < s_.size() && s_[p] == ',') {
      ++p;
      if (!parse_int(&p, hi)) *hi = -1;
    }
    if (p >= s_.size() || s_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }

  std::string quantified(std::string atom) {
    bool quantified_once = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      int64_t lo = 0, hi = -1;
      std::string op;
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        op = std::string(1, c);
      } else if (c == '{' && counted(&lo, &hi)) {
        if (hi >= 0 && hi < lo) error("repetition {", lo, ",", hi, "} has max < min");
        op = hi < 0 ? cat("{", lo, ",}") : cat("{", lo, ",", hi, "}");
      } else {
        break;
      }
      if (quantified_once) error("a quantifier follows a quantifier");
      quantified_once = true;
      if (pos_ < s_.size() && s_[pos_] == '+') error("possessive quantifiers are not supported");
      if (pos_ < s_.size() && s_[pos_] == '?') ++pos_;  // lazy: the same language
      atom = "(" + atom + ")" + op;
    }
    return atom;
  }

  uint32_t hex_escape() {
    // at the char after \x
    uint32_t v = 0;
    if (pos_ < s_.size() && s_[pos_] == '{') {
      size_t start = ++pos_;
      while (pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_]))) {
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(s_[pos_])) ? s_[pos_] - '0' : std::tolower(s_[pos_]) - 'a' + 10);
        if (v > 0x10FFFF) error("\\x{...} beyond U+10FFFF");
        ++pos_;
      }
      if (pos_ == start || pos_ >= s_.size() || s_[pos_] != '}') error("malformed \\x{...}");
      ++pos_;
      return v;
    }
    for (int i = 0; i < 2 && pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_])); ++i, ++pos_)
      v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(s_[pos_])) ? s_[pos_] - '0' : std::tolower(s_[pos_]) - 'a' + 10);
    return v;
  }

  uint32_t utf8_char() {
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + size_t(len) > s_.size()) error("invalid UTF-8 in the pattern");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      unsigned char d = static_cast<unsigned char>(s_[pos_ + size_t(i)]);
      if ((d & 0xC0) != 0x80) error("invalid UTF-8 in the pattern");
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += size_t(len);
    return cp;
  }

  // An escape after '\' (pos_ at the escaped char): a class in *ranges (returns true) or a
  // single codepoint in *cp.
  bool escape(Ranges* ranges, bool* negated, uint32_t* cp, bool in_class) {
    if (pos_ >= s_.size()) error("pattern ends with '\\'");
    char c = s_[pos_++];
    *negated = false;
    switch (c) {
      case 'd': *ranges = kDigit; return true;
      case 'w': *ranges = kWord; return true;
      case 's': *ranges = kSpace; return true;
      case 'D': *ranges = kDigit; *negated = true; return true;
      case 'W': *ranges = kWord; *negated = true; return true;
      case 'S': *ranges = kSpace; *negated = true; return true;
      case 'n': *cp = '\n'; return false;
      case 't': *cp = '\t'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case 'e': *cp = 0x1B; return false;
      case 'x': *cp = hex_escape(); return false;
      case 'b':
        if (in_class) { *cp = '\b'; return false; }
        error("word boundaries (\\b) are not supported");
      case 'B': error("word boundaries (\\B) are not supported");
      case 'k': case 'g': error("backreferences (\\", c, ") are not supported");
      case 'A': case 'z': case 'Z': case 'G': error("anchor \\", c, " is not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') error("backreferences (\\", c, ") are not supported");
    if (std::isalnum(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80)
      error("escape '\\", c, "' is not supported");
    *cp = uint32_t(static_cast<unsigned char>(c));
    return false;
  }

  std::string char_class() {
    size_t start = pos_++;  // [
    bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) ++pos_;
    Ranges ranges;
    bool first = true;
    while (true) {
      if (pos_ >= s_.size()) {
        pos_ = start;
        error("unterminated character class");
      }
      if (s_[pos_] == ']' && !first) break;
      first = false;
      if (s_.substr(pos_, 2) == "[:") error("POSIX classes ([:name:]) are not supported");
      uint32_t lo;
      if (s_[pos_] == '\\') {
        ++pos_;
        Ranges sub;
        bool neg;
        if (escape(&sub, &neg, &lo, true)) {
          if (neg) sub = complement(sub);
          ranges.insert(ranges.end(), sub.begin(), sub.end());
          continue;
        }
      } else {
        lo = utf8_char();
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          ++pos_;
          Ranges sub;
          bool neg;
          if (escape(&sub, &neg, &hi, true)) error("a class escape cannot end a range");
        } else {
          hi = utf8_char();
        }
        if (hi < lo) error("character class range is out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return gbnf_class(ranges, negated);
  }

  std::string atom(int depth) {
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (s_.substr(pos_, 2) == "?=" || s_.substr(pos_, 2) == "?!") error("lookahead is not supported");
      if (s_.substr(pos_, 3) == "?<=" || s_.substr(pos_, 3) == "?<!") error("lookbehind is not supported");
      if (s_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (s_.substr(pos_, 2) == "?<" || s_.substr(pos_, 3) == "?P<" || s_.substr(pos_, 2) == "?'") {
        size_t close = s_.find_first_of(">'", pos_ + 2);
        if (close == std::string_view::npos) error("unterminated group name");
        pos_ = close + 1;
      } else if (pos_ < s_.size() && s_[pos_] == '?') {
        error("group syntax '(?", pos_ + 1 < s_.size() ? s_[pos_ + 1] : ' ',
              "' (inline flags, atomic or conditional groups) is not supported");
      }
      std::string inner = alternation(depth + 1);
      if (pos_ >= s_.size() || s_[pos_] != ')') error("unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return gbnf_class({{'\n', '\n'}}, true);
    }
    if (c == '^') error("'^' is only supported at the start");
    if (c == '$') error("'$' is only supported at the end");
    if (c == '*' || c == '+' || c == '?') error("quantifier '", c, "' has nothing to repeat");
    if (c == '{') {
      int64_t lo, hi;
      size_t save = pos_;
      if (counted(&lo, &hi)) {
        pos_ = save;
        error("quantifier has nothing to repeat");
      }
    }
    uint32_t cp;
    if (c == '\\') {
      ++pos_;
      Ranges r;
      bool neg;
      if (escape(&r, &neg, &cp, false)) return gbnf_class(r, neg);
    } else {
      cp = utf8_char();
    }
    return gbnf_class({{cp, cp}}, false);
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string regex_to_gbnf(std::string_view pattern) { return RegexParser(pattern).parse(); }

Grammar from_regex(std::string_view pattern) {
  return from_gbnf("root ::= " + regex_to_gbnf(pattern) + "\n");
}

}  // namespace strata::grammar
