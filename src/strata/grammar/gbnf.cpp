// GBNF (llama.cpp's grammar format) -> Grammar.
//
//   root  ::= item ("," ws item)*     # comments run to the end of the line
//   item  ::= [a-z]+ | "\"" [^"\\]* "\"" | ("x" | "y"){2,4}
//
// Newlines are plain whitespace: a rule runs until the next `name ::=` or the end.
#include <cctype>

#include "strata/core/error.h"
#include "strata/grammar/grammar.h"

namespace strata::grammar {
namespace {

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : s_(text) {}

  Grammar parse() {
    skip_space();
    while (pos_ < s_.size()) {
      size_t at = pos_;
      std::string name = parse_name();
      skip_space();
      expect("::=", "'::=' after the rule name");
      int32_t r = b_.rule(name);
      if (defined_.size() <= size_t(r)) defined_.resize(size_t(r) + 1, 0);
      if (defined_[size_t(r)]) fail_at(at, "rule '", name, "' is defined twice");
      defined_[size_t(r)] = 1;
      skip_space();
      for (auto& seq : parse_alternatives(name, 0)) b_.add_alternative(r, std::move(seq));
    }
    if (!b_.has_rule("root")) fail("gbnf: no rule named 'root'");
    int32_t root = b_.rule("root");
    try {
      return b_.build(root);
    } catch (const Error& e) {
      fail("gbnf: ", std::string(e.what()).substr(std::string_view("grammar: ").size()));
    }
  }

 private:
  template <class... A>
  [[noreturn]] void fail_at(size_t at, A&&... a) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    fail("gbnf: line ", line, " column ", col, ": ", std::forward<A>(a)...);
  }

  bool name_char(char c) const {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }

  void skip_space() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  void expect(std::string_view tok, const char* what) {
    if (s_.substr(pos_, tok.size()) != tok) fail_at(pos_, "expected ", what);
    pos_ += tok.size();
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail_at(start, "expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  // At `name ::=`: the start of the next rule.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
        fail_at(pos_, "expected ", digits, " hex digits in an escape");
      char c = s_[pos_++];
      v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                                         : (std::tolower(c) - 'a' + 10));
    }
    return v;
  }

  // One codepoint of a literal or class (escapes decoded).
  uint32_t parse_char() {
    size_t at = pos_;
    if (pos_ >= s_.size()) fail_at(at, "unexpected end of the grammar");
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= s_.size()) fail_at(at, "unexpected end after '\\'");
      char e = s_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'f': return '\f';
        case 'v': return '\v';
        case '0': return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^':
          return uint32_t(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': {
          uint32_t v = hex(8);
          if (v > 0x10FFFF) fail_at(at, "codepoint escape beyond U+10FFFF");
          return v;
        }
        default: fail_at(at, "unknown escape '\\", e, "'");
      }
    }
    // A UTF-8 character of the grammar text.
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + size_t(len) > s_.size()) fail_at(at, "invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      unsigned char d = static_cast<unsigned char>(s_[pos_ + size_t(i)]);
      if ((d & 0xC0) != 0x80) fail_at(at, "invalid UTF-8 in the grammar");
      cp = (cp << 6) | (d & 0x3F);
    }
    pos_ += size_t(len);
    return cp;
  }

  Sequence parse_literal() {
    size_t at = pos_;
    ++pos_;  // "
    std::string bytes;
    while (true) {
      if (pos_ >= s_.size()) fail_at(at, "unterminated string literal");
      if (s_[pos_] == '"') break;
      append_utf8(parse_char(), &bytes);
    }
    ++pos_;
    return GrammarBuilder::literal(bytes);
  }

  Element parse_class() {
    size_t at = pos_;
    ++pos_;  // [
    bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<CodepointRange> ranges;
    while (true) {
      if (pos_ >= s_.size()) fail_at(at, "unterminated character class");
      if (s_[pos_] == ']') break;
      uint32_t lo = parse_char();
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
        if (hi < lo) fail_at(at, "character class range is reversed");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    return b_.codepoints(std::move(ranges), negated);
  }

  int64_t parse_count() {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > 1000000) fail_at(start, "repetition count too large");
    }
    if (pos_ == start) fail_at(start, "expected a number in {m,n}");
    return v;
  }

  std::vector<Sequence> parse_alternatives(const std::string& rule_name, int depth) {
    if (depth > 200) fail_at(pos_, "groups nested too deeply");
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(rule_name, depth));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space();
      alts.push_back(parse_sequence(rule_name, depth));
    }
    return alts;
  }

  Sequence parse_sequence(const std::string& rule_name, int depth) {
    Sequence seq;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      size_t at = pos_;
      Sequence item;
      if (c == '|' || c == ')') break;
      if (c == '"') {
        item = parse_literal();
      } else if (c == '[') {
        item = {parse_class()};
      } else if (c == '.') {
        ++pos_;
        item = {b_.codepoints({}, true)};
      } else if (c == '(') {
        ++pos_;
        skip_space();
        auto alts = parse_alternatives(rule_name, depth + 1);
        if (pos_ >= s_.size() || s_[pos_] != ')') fail_at(at, "unclosed '('");
        ++pos_;
        item = {b_.choice(std::move(alts), rule_name)};
      } else if (name_char(c)) {
        if (at_rule_start()) break;
        std::string name = parse_name();
        item = {Element::reference(b_.rule(name))};
      } else {
        fail_at(at, "unexpected character '", c, "'");
      }
      skip_space();
      // Postfix operators.
      while (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' ||
                                  s_[pos_] == '{')) {
        char op = s_[pos_++];
        int64_t lo = 0, hi = -1;
        if (op == '+') lo = 1;
        if (op == '?') hi = 1;
        if (op == '{') {
          skip_space();
          lo = parse_count();
          hi = lo;
          skip_space();
          if (pos_ < s_.size() && s_[pos_] == ',') {
            ++pos_;
            skip_space();
            hi = (pos_ < s_.size() && s_[pos_] == '}') ? -1 : parse_count();
            skip_space();
          }
          if (pos_ >= s_.size() || s_[pos_] != '}') fail_at(at, "unclosed '{' repetition");
          ++pos_;
          if (hi >= 0 && hi < lo) fail_at(at, "repetition {", lo, ",", hi, "} has max < min");
        }
        try {
          item = {b_.repeat(item, lo, hi, rule_name)};
        } catch (const Error& e) {
          fail_at(at, e.what());
        }
        skip_space();
      }
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  std::string_view s_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::vector<char> defined_;  // by rule id: has a definition
};

}  // namespace

Grammar from_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace strata::grammar
