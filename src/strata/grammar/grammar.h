// A context-free grammar over bytes: rules whose alternatives are sequences of elements, each
// element one byte out of a set or a reference to a rule. Repetition, optional parts and
// Unicode classes are lowered to rules by the builder (GrammarBuilder) or the front ends
// (from_gbnf, from_regex, from_json_schema; see docs/GRAMMAR.md).
//
//   GrammarBuilder b;
//   int32_t root = b.rule("root");
//   b.add_alternative(root, b.literal("yes"));
//   b.add_alternative(root, b.literal("no"));
//   Grammar g = b.build(root);
//
// The built grammar is flattened into positions: position p is a dot inside one alternative
// (before element i, or at its end). The matcher's stacks are chains of positions.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::grammar {

using ByteSet = std::bitset<256>;

struct Element {
  int32_t rule = -1;  // >= 0: a reference to that rule; < 0: one byte out of `bytes`
  ByteSet bytes;
  bool is_rule() const { return rule >= 0; }
  static Element byte_set(const ByteSet& s) { return Element{-1, s}; }
  static Element reference(int32_t r) { return Element{r, {}}; }
};
using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

// A codepoint range [lo, hi], both inclusive.
using CodepointRange = std::pair<uint32_t, uint32_t>;

class Grammar {
 public:
  // Positions point into the rules: moves keep them valid, copies would not.
  Grammar() = default;
  Grammar(Grammar&&) = default;
  Grammar& operator=(Grammar&&) = default;
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  const std::vector<Rule>& rules() const { return rules_; }
  int32_t root() const { return root_; }
  // The grammar in GBNF-like text (byte sets as [\xHH-\xHH]), for messages and tests.
  std::string to_string() const;

  // Flattened positions.
  int32_t num_positions() const { return int32_t(pos_rule_.size()); }
  // The first position of each alternative of rule r.
  const std::vector<int32_t>& alternative_starts(int32_t r) const { return alt_start_[size_t(r)]; }
  bool at_end(int32_t p) const { return pos_elem_[size_t(p)] == nullptr; }
  // The element after the dot (not at_end).
  const Element& element(int32_t p) const { return *pos_elem_[size_t(p)]; }
  int32_t rule_of(int32_t p) const { return pos_rule_[size_t(p)]; }

 private:
  friend class GrammarBuilder;
  void flatten();
  std::vector<Rule> rules_;
  int32_t root_ = 0;
  std::vector<std::vector<int32_t>> alt_start_;
  std::vector<const Element*> pos_elem_;
  std::vector<int32_t> pos_rule_;
};

class GrammarBuilder {
 public:
  // The rule of that name, created empty (to be defined later) when new.
  int32_t rule(const std::string& name);
  // A new rule with a unique name made from `hint`.
  int32_t fresh_rule(const std::string& hint);
  bool has_rule(const std::string& name) const;
  void add_alternative(int32_t rule, Sequence seq);
  const std::string& name(int32_t rule) const { return rules_[size_t(rule)].name; }

  // Helpers that return sequences or elements; they may add rules.
  static Sequence literal(std::string_view bytes);
  // One codepoint out of the ranges (or, negated, out of all others), as UTF-8.
  Element codepoints(std::vector<CodepointRange> ranges, bool negated);
  // Repetition of `item` (a sequence), min..max times (max < 0: unbounded).
  Element repeat(const Sequence& item, int64_t min, int64_t max, const std::string& hint);
  // A rule holding the given alternatives.
  Element choice(std::vector<Sequence> alternatives, const std::string& hint);

  // Checks every referenced rule is defined and no rule is left-recursive (the matcher needs
  // that); throws strata::Error naming the rule.
  Grammar build(int32_t root) const;

 private:
  std::vector<Rule> rules_;
};

// UTF-8 encoding of a codepoint (< 0x110000).
void append_utf8(uint32_t cp, std::string* out);

// Front ends. Each throws strata::Error naming the feature and position of bad input.
// GBNF: llama.cpp's grammar format; the root rule is `root`.
Grammar from_gbnf(std::string_view text);
// A regular expression matched against the whole output (PCRE2 syntax subset).
Grammar from_regex(std::string_view pattern);
// The regex as a GBNF expression (for embedding in generated grammars).
std::string regex_to_gbnf(std::string_view pattern);

}  // namespace strata::grammar
