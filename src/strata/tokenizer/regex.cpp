#include "strata/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "strata/core/error.h"
#include "strata/tokenizer/unicode.h"

namespace strata::tok {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

pcre2_match_data* thread_match_data() {
  thread_local MatchData m;
  return m.md;
}

}  // namespace

// Oniguruma and PCRE2 differ on a few escapes: \s is White_Space in Oniguruma (PCRE2's UCP \s
// adds U+180E), \h is a hex digit, \w follows UTS #18, and \uHHHH is a code point.
std::string Regex::translate(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      bool in_class = class_depth > 0;
      auto put = [&](const char* inside, const char* outside) {
        out += in_class ? inside : outside;
        ++i;
      };
      switch (e) {
        case 's':
          put("\\p{White_Space}", "\\p{White_Space}");
          continue;
        case 'S':
          put("\\P{White_Space}", "\\P{White_Space}");
          continue;
        case 'h':
          put("0-9A-Fa-f", "[0-9A-Fa-f]");
          continue;
        case 'H':
          if (!in_class) {
            put("", "[^0-9A-Fa-f]");
            continue;
          }
          break;
        case 'w':
          put("\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}",
              "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]");
          continue;
        case 'W':
          if (!in_class) {
            put("", "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]");
            continue;
          }
          break;
        case 'u':
          if (i + 6 <= p.size()) {
            std::string hex(p.substr(i + 2, 4));
            if (hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos) {
              out += "\\x{" + hex + "}";
              i += 5;
              continue;
            }
          }
          break;
        default:
          break;
      }
      out += c;
      out += e;
      ++i;
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

Regex::Regex(std::string_view pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  std::string translated = translate(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail(where, ": regex does not compile at offset ", off, ": ", reinterpret_cast<char*>(msg));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

bool Regex::search(std::string_view subject, size_t from, size_t* start, size_t* end) const {
  pcre2_match_data* md = thread_match_data();
  auto sub = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = impl_->jit ? pcre2_jit_match(impl_->code, sub, subject.size(), from, PCRE2_NO_UTF_CHECK,
                                        md, nullptr)
                      : -1;
  if (!impl_->jit || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    rc = pcre2_match(impl_->code, sub, subject.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    fail("tokenizer regex: match failed: ", reinterpret_cast<char*>(msg));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *start = ov[0];
  *end = ov[1];
  return true;
}

size_t Regex::next_char_len(std::string_view s, size_t pos) {
  return size_t(utf8_len(uint8_t(s[pos])));
}

}  // namespace strata::tok
