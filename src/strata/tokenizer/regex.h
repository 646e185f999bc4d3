// PCRE2 (UTF + UCP, JIT when available) regexes with the semantics of the Oniguruma regexes
// that HF tokenizers uses for Split pre-tokenizers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace strata::tok {

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern; throws strata::Error naming `where` on failure.
  Regex(std::string_view pattern, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls f(start, end) for each match in subject (valid UTF-8), in order, as the onig crate's
  // find_iter does: an empty match right at the end of the previous match is skipped.
  template <class F>
  void find_iter(std::string_view subject, F&& f) const {
    size_t pos = 0, last_end = size_t(-1);
    size_t s, e;
    while (pos <= subject.size() && search(subject, pos, &s, &e)) {
      if (s == e && e == last_end) {
        if (pos >= subject.size()) break;
        pos += next_char_len(subject, pos);
        continue;
      }
      f(s, e);
      pos = e;
      last_end = e;
    }
  }

  // Oniguruma pattern rewritten for PCRE2 (exposed for tests).
  static std::string translate(std::string_view onig_pattern);

 private:
  bool search(std::string_view subject, size_t from, size_t* start, size_t* end) const;
  static size_t next_char_len(std::string_view s, size_t pos);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::tok
