// Jinja lexer (see jinja_lexer.h). Mirrors jinja2's lexer rules: "-" strips all whitespace next
// to a tag, "+" disables lstrip/trim, lstrip_blocks strips spaces/tabs before {% and {# on an
// otherwise empty line, trim_blocks drops the newline after %} and #}.
#include "strata/tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cstring>

#include "strata/core/error.h"
#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

void syntax_error(int line, int col, const std::string& message) {
  fail("chat template line ", line, ", column ", col, ": ", message);
}

const char* token_desc(Tok t) {
  switch (t) {
    case Tok::kText: return "template data";
    case Tok::kVarBegin: return "begin of print statement";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kBlockBegin: return "begin of statement block";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kName: return "name";
    case Tok::kString: return "string";
    case Tok::kInt: return "integer";
    case Tok::kFloat: return "float";
    case Tok::kOp: return "operator";
    case Tok::kEof: return "end of template";
  }
  return "token";
}

namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python-style rstrip of all Unicode whitespace.
std::string rstrip_ws(std::string_view s) {
  std::u32string u = decode_utf8(s);
  size_t e = u.size();
  while (e > 0 && py_isspace(u[e - 1])) --e;
  return encode_utf8(std::u32string_view(u).substr(0, e));
}

// The first code point of s (which must not be empty) and its length in bytes.
char32_t first_code_point(std::string_view s, size_t* len) {
  unsigned char c = s[0];
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
  n = std::min(n, s.size());
  std::u32string u = decode_utf8(s.substr(0, n));
  std::string enc;
  append_utf8(enc, u[0]);
  *len = enc.size();
  return u[0];
}

// Number of bytes of Unicode whitespace at the start of s (the regex \s*).
size_t lstrip_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t n;
    if (!py_isspace(first_code_point(s.substr(i), &n))) break;
    i += n;
  }
  return i;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit_text(pos, src_.substr(pos));
        break;
      }
      char kind = src_[start + 1];
      char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      if (sign != '-' && sign != '+') sign = 0;
      size_t raw_end = kind == '%' ? match_raw_begin(start) : 0;
      std::string text = src_.substr(pos, start - pos);
      text = control_text(text, sign, kind != '{' || raw_end, line_starting);
      emit_text(pos, text);
      if (raw_end) {
        pos = lex_raw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(start, start + 2 + (sign ? 1 : 0), &line_starting);
      } else {
        pos = lex_tag(start, kind == '%', start + 2 + (sign ? 1 : 0), &line_starting);
      }
    }
    tokens_.push_back(make(Tok::kEof, src_.size()));
    return std::move(tokens_);
  }

 private:
  void position(size_t offset, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t idx = size_t(it - line_starts_.begin()) - 1;
    *line = int(idx + 1);
    *col = int(offset - line_starts_[idx] + 1);
  }

  Token make(Tok type, size_t offset, std::string text = {}) const {
    Token t{type, std::move(text)};
    position(offset, &t.line, &t.col);
    return t;
  }

  [[noreturn]] void error_at(size_t offset, const std::string& message) const {
    int line, col;
    position(offset, &line, &col);
    syntax_error(line, col, message);
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // Whitespace control for the data before a tag: "-" strips everything, otherwise
  // lstrip_blocks removes the spaces/tabs that start the tag's line.
  static std::string control_text(const std::string& text, char sign, bool block_like,
                                  bool line_starting) {
    if (sign == '-') return rstrip_ws(text);
    if (sign == '+' || !block_like) return text;
    size_t l_pos = text.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    if (l_pos == 0 && !line_starting) return text;
    for (size_t i = l_pos; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return text;
    return text.substr(0, l_pos);
  }

  void emit_text(size_t offset, std::string text) {
    if (!text.empty()) tokens_.push_back(make(Tok::kText, offset, std::move(text)));
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%}) at start; returns the offset after it, or 0.
  size_t match_raw_begin(size_t start) const {
    size_t i = start + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return 0;
    i += 3;
    if (i < src_.size() && is_name_char(src_[i])) return 0;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    if (src_.compare(i, 3, "-%}") == 0)
      return i + 3 + lstrip_len(std::string_view(src_).substr(i + 3));
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return 0;
  }

  // The body of {% raw %}...{% endraw %}, emitted as data.
  size_t lex_raw(size_t body, bool* line_starting) {
    *line_starting = src_[body - 1] == '\n';
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      while (j < src_.size() && is_ws(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_ws(src_[j])) ++j;
      size_t end = end_of_block(j, line_starting);
      if (end == 0) continue;
      emit_text(body, control_text(src_.substr(body, i - body), sign, true, *line_starting));
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    error_at(body, "Missing end of raw directive");
  }

  // Matches +%} | -%}\s* | %}\n? at i; returns the offset after it or 0.
  size_t end_of_block(size_t i, bool* line_starting) const {
    size_t end = 0;
    if (src_.compare(i, 3, "+%}") == 0) {
      end = i + 3;
    } else if (src_.compare(i, 3, "-%}") == 0) {
      end = i + 3 + lstrip_len(std::string_view(src_).substr(i + 3));
    } else if (src_.compare(i, 2, "%}") == 0) {
      end = i + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
    }
    if (end) *line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_comment(size_t start, size_t body, bool* line_starting) {
    for (size_t q = src_.find("#}", body); q != std::string::npos; q = src_.find("#}", q + 1)) {
      size_t end;
      if (q > body && src_[q - 1] == '-') {
        end = q + 2 + lstrip_len(std::string_view(src_).substr(q + 2));
      } else if (q > body && src_[q - 1] == '+') {
        end = q + 2;
      } else {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      }
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    error_at(start, "Missing end of comment tag");
  }

  size_t lex_tag(size_t start, bool block, size_t pos, bool* line_starting) {
    tokens_.push_back(make(block ? Tok::kBlockBegin : Tok::kVarBegin, start));
    std::vector<char> balance;
    while (true) {
      if (pos >= src_.size()) {
        error_at(start, cat("unexpected end of template, expected '",
                            block ? "end of statement block" : "end of print statement", "'"));
      }
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          end = end_of_block(pos, line_starting);
        } else if (src_.compare(pos, 3, "-}}") == 0) {
          end = pos + 3 + lstrip_len(std::string_view(src_).substr(pos + 3));
          *line_starting = src_[end - 1] == '\n';
        } else if (src_.compare(pos, 2, "}}") == 0) {
          end = pos + 2;
          *line_starting = false;
        }
        if (end) {
          tokens_.push_back(make(block ? Tok::kBlockEnd : Tok::kVarEnd, pos));
          return end;
        }
      }
      char c = src_[pos];
      if (is_ws(c)) {
        ++pos;
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t e = pos;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        tokens_.push_back(make(Tok::kName, pos, src_.substr(pos, e - pos)));
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, &balance);
      }
    }
  }

  size_t lex_string(size_t pos) {
    char q = src_[pos];
    size_t i = pos + 1;
    while (i < src_.size() && src_[i] != q) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) error_at(pos, "unexpected char '" + std::string(1, q) + "'");
    std::string value, err;
    if (!decode_string_escapes(std::string_view(src_).substr(pos + 1, i - pos - 1), &value, &err))
      error_at(pos, err);
    tokens_.push_back(make(Tok::kString, pos, std::move(value)));
    return i + 1;
  }

  // Digits with single underscores between them: (\d+_)*\d+
  size_t scan_digits(size_t i) const {
    if (i >= src_.size() || !is_digit(src_[i])) return 0;
    while (i < src_.size() && is_digit(src_[i])) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) ++i;
    }
    return i;
  }

  void push_number(Tok type, size_t pos, size_t end, int64_t ival, double fval) {
    Token t = make(type, pos, src_.substr(pos, end - pos));
    t.ival = ival;
    t.fval = fval;
    tokens_.push_back(std::move(t));
  }

  size_t lex_number(size_t pos) {
    size_t n = src_.size();
    // float: digits ((. digits)? e[+-]? digits | . digits), never right after a '.'.
    size_t int_end = scan_digits(pos);
    if (pos == 0 || src_[pos - 1] != '.') {
      size_t frac_end = 0, exp_end = 0;
      if (int_end < n && src_[int_end] == '.') frac_end = scan_digits(int_end + 1);
      size_t e = frac_end ? frac_end : int_end;
      if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t k = e + 1;
        if (k < n && (src_[k] == '+' || src_[k] == '-')) ++k;
        exp_end = scan_digits(k);
      }
      if (size_t end = exp_end ? exp_end : frac_end) {
        std::string text;
        for (size_t k = pos; k < end; ++k)
          if (src_[k] != '_') text.push_back(src_[k]);
        push_number(Tok::kFloat, pos, end, 0, std::strtod(text.c_str(), nullptr));
        return end;
      }
    }
    // integer: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[0-9a-f])+ | [1-9](_?\d)* | 0(_?0)*
    auto digit_of = [](char c) {
      char l = char(c | 0x20);
      return is_digit(c) ? c - '0' : (l >= 'a' && l <= 'f') ? l - 'a' + 10 : 99;
    };
    if (src_[pos] == '0' && pos + 1 < n) {
      char p = char(src_[pos + 1] | 0x20);
      int base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
      if (base) {
        std::string digits;
        size_t i = pos + 2;
        while (true) {
          size_t j = i < n && src_[i] == '_' ? i + 1 : i;
          if (j >= n || digit_of(src_[j]) >= base) break;
          digits.push_back(src_[j]);
          i = j + 1;
        }
        if (!digits.empty()) {
          auto v = parse_py_int(digits, base);
          if (!v) error_at(pos, "integer literal too large (strata uses 64-bit integers)");
          push_number(Tok::kInt, pos, i, *v, 0);
          return i;
        }
      }
    }
    size_t i = pos + 1;
    std::string digits(1, src_[pos]);
    while (true) {
      size_t j = i < n && src_[i] == '_' ? i + 1 : i;
      if (j >= n || !is_digit(src_[j]) || (src_[pos] == '0' && src_[j] != '0')) break;
      digits.push_back(src_[j]);
      i = j + 1;
    }
    auto v = parse_py_int(digits, 10);
    if (!v) error_at(pos, "integer literal too large (strata uses 64-bit integers)");
    push_number(Tok::kInt, pos, i, *v, 0);
    return i;
  }

  size_t lex_operator(size_t pos, std::vector<char>* balance) {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos, 2, op) == 0) {
        tokens_.push_back(make(Tok::kOp, pos, op));
        return pos + 2;
      }
    }
    char c = src_[pos];
    if (c == 0 || !std::strchr("+-/*%~[](){}><=.:|,;", c)) {
      size_t len;
      char32_t cp = first_code_point(std::string_view(src_).substr(pos), &len);
      std::string shown;
      append_utf8(shown, cp);
      error_at(pos, "unexpected char '" + shown + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance->empty()) error_at(pos, std::string("unexpected '") + c + "'");
      char expected = balance->back();
      balance->pop_back();
      if (expected != c)
        error_at(pos, std::string("unexpected '") + c + "', expected '" + expected + "'");
    }
    tokens_.push_back(make(Tok::kOp, pos, std::string(1, c)));
    return pos + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// \r\n and \r become \n; one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> lex_template(std::string_view source) {
  size_t bad = 0;
  if (!valid_utf8(source, &bad)) {
    fail("chat template is not valid UTF-8 (byte offset ", bad, ")");
  }
  return Lexer(normalize_source(source)).run();
}

}  // namespace strata::jinja
