// The stack-set matcher and the GBNF front end on small grammars.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "strata/core/error.h"
#include "strata/grammar/grammar.h"
#include "strata/grammar/matcher.h"

namespace {

using namespace strata::grammar;

std::shared_ptr<const Grammar> gbnf(const std::string& text) {
  return std::make_shared<Grammar>(from_gbnf(text));
}

// Whole-string match, one byte at a time.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  GrammarMatcher m(g);
  for (char c : s)
    if (!m.accept_token(std::string(1, c))) return false;
  return m.can_end();
}

TEST(GrammarMatcher, LiteralAlternatives) {
  auto g = gbnf(R"g(root ::= "yes" | "no" | "maybe")g");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_TRUE(matches(g, "maybe"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_FALSE(matches(g, "yess"));
  EXPECT_FALSE(matches(g, ""));
}

TEST(GrammarMatcher, TokensAreAllOrNothing) {
  auto g = gbnf(R"g(root ::= "abc" "d"*)g");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.accept_token("abx"));
  EXPECT_TRUE(m.accept_token("ab"));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token("cx"));
  EXPECT_TRUE(m.accept_token("cdd"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_terminated());  // more d's may follow
  EXPECT_FALSE(m.accept_token(""));
}

TEST(GrammarMatcher, TerminatedWhenNothingCanFollow) {
  auto g = gbnf(R"g(root ::= "a" "b"?)g");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_token("a"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_terminated());
  ASSERT_TRUE(m.accept_token("b"));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token("b"));
}

TEST(GrammarMatcher, RollbackRestoresEarlierStates) {
  auto g = gbnf(R"g(root ::= "[" item ("," item)* "]"
item ::= [0-9]+)g");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_token("[1"));
  ASSERT_TRUE(m.accept_token(",2"));
  ASSERT_TRUE(m.accept_token("]"));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(m.rollback_depth(), 3);
  m.rollback(2);
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token("]x"));
  EXPECT_TRUE(m.accept_token("5,6]"));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(2);
  EXPECT_FALSE(m.accept_token("1"));  // back at the start: "[" is needed
  EXPECT_TRUE(m.accept_token("[7]"));
  EXPECT_THROW(m.rollback(5), strata::Error);
}

TEST(GrammarMatcher, RollbackIsBoundedByMaxRollback) {
  auto g = gbnf(R"g(root ::= "a"*)g");
  GrammarMatcher m(g, 3);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(m.accept_token("a"));
  EXPECT_EQ(m.rollback_depth(), 3);
}

TEST(GrammarMatcher, NestedRecursionAndAmbiguity) {
  // Balanced parentheses, and an ambiguous grammar where both readings stay alive.
  auto paren = gbnf(R"g(root ::= ("(" root ")")*)g");
  EXPECT_TRUE(matches(paren, ""));
  EXPECT_TRUE(matches(paren, "(()())((()))"));
  EXPECT_FALSE(matches(paren, "(()"));
  EXPECT_FALSE(matches(paren, "())"));
  auto amb = gbnf(R"g(root ::= "a"* "ab" | "a" "b"+)g");
  EXPECT_TRUE(matches(amb, "aaab"));
  EXPECT_TRUE(matches(amb, "abbb"));
  EXPECT_FALSE(matches(amb, "aabb"));
}

TEST(GrammarMatcher, RightRecursionKeepsStacksBounded) {
  auto g = gbnf(R"g(root ::= "\"" chars "\""
chars ::= [a-z] chars | "")g");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_token("\""));
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.accept_token("x"));
  // Every step after the first reaches the same state: the arena stops growing.
  size_t nodes = m.engine().num_nodes();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.accept_token("y"));
  EXPECT_LE(m.engine().num_nodes(), nodes + 8);
  EXPECT_TRUE(m.accept_token("\""));
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarMatcher, Utf8ClassesAndNegation) {
  auto g = gbnf(R"g(root ::= [^"a]+)g");
  EXPECT_TRUE(matches(g, "xyz"));
  EXPECT_TRUE(matches(g, "é€😀"));
  EXPECT_FALSE(matches(g, "xa"));
  EXPECT_FALSE(matches(g, "\""));
  EXPECT_FALSE(matches(g, "\xC3"));      // truncated character
  EXPECT_FALSE(matches(g, "\xED\xA0\x80"));  // a surrogate is not UTF-8
  auto greek = gbnf(R"g(root ::= [α-ω]{2})g");
  EXPECT_TRUE(matches(greek, "αω"));
  EXPECT_FALSE(matches(greek, "α"));
  EXPECT_FALSE(matches(greek, "aω"));
  auto any = gbnf(R"g(root ::= "<" . ">")g");
  EXPECT_TRUE(matches(any, "<€>"));
  EXPECT_FALSE(matches(any, "<>"));
}

TEST(GrammarMatcher, BoundedRepetition) {
  auto g = gbnf(R"g(root ::= "x"{2,4} "y"{3} "z"{1,})g");
  EXPECT_TRUE(matches(g, "xxyyyz"));
  EXPECT_TRUE(matches(g, "xxxxyyyzzz"));
  EXPECT_FALSE(matches(g, "xyyyz"));
  EXPECT_FALSE(matches(g, "xxxxxyyyz"));
  EXPECT_FALSE(matches(g, "xxyyz"));
  EXPECT_FALSE(matches(g, "xxyyy"));
}

TEST(GrammarMatcher, GbnfExampleGrammars) {
  // In the style of llama.cpp's grammars/: arithmetic, a list, JSON.
  auto arith = gbnf(R"g(# arithmetic
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)g");
  EXPECT_TRUE(matches(arith, "a+(b*2)= 3\n"));
  EXPECT_FALSE(matches(arith, "a+= 3\n"));
  auto list = gbnf(R"g(root ::= item+
item ::= "- " [^\r\n\x0b\x0c\u2028]+ "\n")g");
  EXPECT_TRUE(matches(list, "- milk\n- eggs\n"));
  EXPECT_FALSE(matches(list, "- \n"));
  auto json = gbnf(R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws
array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws
string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)g");
  EXPECT_TRUE(matches(json, R"g({"a": [1, 2.5, {"b": null}], "c": "x\"y\u00e9"})g"));
  EXPECT_FALSE(matches(json, R"g({"a": [1, 2.5,]})g"));
  EXPECT_FALSE(matches(json, R"g({"a" 1})g"));
}

TEST(GrammarMatcher, GbnfErrorsNameThePosition) {
  auto error_of = [](const std::string& text) {
    try {
      from_gbnf(text);
    } catch (const strata::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("root ::= \"abc"), "gbnf: line 1 column 10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= [a-"), "gbnf: line 1 column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= x"), "gbnf: rule 'x' is used but not defined");
  EXPECT_EQ(error_of("item ::= \"a\""), "gbnf: no rule named 'root'");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""), "gbnf: line 2 column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("root ::= (\"a\""), "gbnf: line 1 column 10: unclosed '('");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "gbnf: line 1 column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "gbnf: line 1 column 10: repetition {3,1} has max < min");
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
            "gbnf: rule 'root' is left-recursive (it can derive itself before any byte, e.g. "
            "through a repetition of something that can be empty), which is not supported");
  EXPECT_EQ(error_of("root ::= \"a\" ?? @"), "gbnf: line 1 column 17: unexpected character '@'");
}

}  // namespace
