// from_regex against PCRE2 (UTF mode, anchored at both ends): on every pattern and string of the
// list, the grammar accepts the string exactly when PCRE2 matches all of it.
#include <gtest/gtest.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/grammar/grammar.h"
#include "strata/grammar/matcher.h"

namespace {

using namespace strata::grammar;

bool pcre2_full_match(const std::string& pattern, const std::string& subject) {
  int err;
  PCRE2_SIZE off;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &off, nullptr);
  EXPECT_NE(re, nullptr) << "PCRE2 refuses " << pattern;
  if (!re) return false;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  int rc = pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0, 0, md,
                       nullptr);
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  return rc >= 0;
}

bool grammar_match(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  GrammarMatcher m(g);
  return (s.empty() || m.accept_token(s)) && m.can_end();
}

struct RegexCase {
  std::string pattern;
  std::vector<std::string> subjects;
};

TEST(GrammarRegex, AgreesWithPcre2) {
  const std::vector<std::string> common = {"", "a", "ab", "abc", "aaa", "b", "0", "42", "-7",
                                           "a1", "_x9", " ", "\t\n", "é", "日本", "a.b", "a\nb",
                                           "x-y", "]", "\\", "{1}", "ab ab"};
  const std::vector<RegexCase> cases = {
      {"abc", {}},
      {"a|ab|abc", {}},
      {"a*", {}},
      {"a+b?", {"aab", "aabb"}},
      {"(ab)*", {"abab", "aba"}},
      {"(?:a|b){2,3}", {"abba", "bab"}},
      {"a{3}", {"aaaa"}},
      {"a{2,}", {"aaaaa"}},
      {"a{0,1}b", {}},
      {"[a-c]+", {"cab", "abcd"}},
      {"[^a-c]", {}},
      {"[^\\n]*", {}},
      {"[]a]+", {"]a]"}},
      {"[a-]+", {"a-a", "--"}},
      {"[\\d\\s]+", {"1 2\t3"}},
      {"[\\w.-]+@[\\w-]+\\.[a-z]{2,}", {"joe.b@mail.com", "joe@mail.c", "@x.com", "a@b.cd"}},
      {"\\d+", {"0123", "12a"}},
      {"-?\\d+(\\.\\d+)?", {"3.14", "-0.5", "1.", ".5"}},
      {"\\w+", {}},
      {"\\s*", {" \x0b\f\r"}},
      {"\\D\\W\\S", {"a b", "1 b", "a.b", "aé!"}},
      {".", {}},
      {".*", {"any thing €"}},
      {"a.c", {"abc", "a\nc", "aéc", "a日c"}},
      {"\\.", {".", "x"}},
      {"\\x41\\x{e9}", {"Aé", "Ae"}},
      {"\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$", {"()[]{}*+?|^$"}},
      {"^abc$", {}},
      {"(a|b)*c", {"ababc", "c", "abca"}},
      {"(?<year>\\d{4})-(?P<m>\\d{2})", {"2024-05", "24-05"}},
      {"((a|b)(c|d))+", {"acbd", "acb"}},
      {"日本語?", {"日本語"}},
      {"[α-ω]+", {"αβγ", "αβγA"}},
      {"a{,3}", {"a{,3}", "aaa"}},
      {"x{a}", {"x{a}", "xa"}},
      {"(|a)b", {"b", "ab"}},
      {"a*?b+?", {"aab", "b"}},
      {"[\\\\\\]]+", {"\\]\\", "]"}},
      {"(\\d{3}-){2}\\d{4}", {"555-123-4567", "555-1234567"}},
  };
  size_t checked = 0;
  for (const RegexCase& c : cases) {
    std::shared_ptr<const Grammar> g;
    try {
      g = std::make_shared<Grammar>(from_regex(c.pattern));
    } catch (const strata::Error& e) {
      ADD_FAILURE() << c.pattern << ": " << e.what();
      continue;
    }
    std::vector<std::string> subjects = common;
    subjects.insert(subjects.end(), c.subjects.begin(), c.subjects.end());
    for (const std::string& s : subjects) {
      EXPECT_EQ(grammar_match(g, s), pcre2_full_match(c.pattern, s)) << "/" << c.pattern << "/ on \"" << s << "\"";
      ++checked;
    }
  }
  EXPECT_GT(checked, 800u);
}

TEST(GrammarRegex, UnsupportedFeaturesAreRefusedByName) {
  auto error_of = [](const std::string& p) {
    try {
      from_regex(p);
    } catch (const strata::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("(a)\\1"), "regex: position 5: backreferences (\\1) are not supported");
  EXPECT_EQ(error_of("(?<n>a)\\k<n>"), "regex: position 9: backreferences (\\k) are not supported");
  EXPECT_EQ(error_of("a(?=b)"), "regex: position 2: lookahead is not supported");
  EXPECT_EQ(error_of("(?<!a)b"), "regex: position 1: lookbehind is not supported");
  EXPECT_EQ(error_of("\\bword"), "regex: position 2: word boundaries (\\b) are not supported");
  EXPECT_EQ(error_of("(?i)abc"), "regex: position 1: group syntax '(?i' (inline flags, atomic or conditional groups) is not supported");
  EXPECT_EQ(error_of("a++"), "regex: position 2: possessive quantifiers are not supported");
  EXPECT_EQ(error_of("a**"), "regex: position 3: a quantifier follows a quantifier");
  EXPECT_EQ(error_of("*a"), "regex: position 0: quantifier '*' has nothing to repeat");
  EXPECT_EQ(error_of("(ab"), "regex: position 3: unclosed '('");
  EXPECT_EQ(error_of("ab)"), "regex: position 2: unmatched ')'");
  EXPECT_EQ(error_of("[abc"), "regex: position 0: unterminated character class");
  EXPECT_EQ(error_of("[z-a]"), "regex: position 4: character class range is out of order");
  EXPECT_EQ(error_of("a^b"), "regex: position 1: '^' is only supported at the start");
  EXPECT_EQ(error_of("[[:alpha:]]"), "regex: position 1: POSIX classes ([:name:]) are not supported");
  EXPECT_EQ(error_of("\\p{L}"), "regex: position 2: escape '\\p' is not supported");
}

}  // namespace
