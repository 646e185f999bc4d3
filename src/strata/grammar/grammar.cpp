#include "strata/grammar/grammar.h"

#include <algorithm>
#include <cstdio>

#include "strata/core/error.h"

namespace strata::grammar {

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

int32_t GrammarBuilder::rule(const std::string& name) {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return int32_t(i);
  rules_.push_back(Rule{name, {}});
  return int32_t(rules_.size() - 1);
}

bool GrammarBuilder::has_rule(const std::string& name) const {
  return std::any_of(rules_.begin(), rules_.end(), [&](const Rule& r) { return r.name == name; });
}

int32_t GrammarBuilder::fresh_rule(const std::string& hint) {
  // '/' cannot appear in a GBNF rule name, so a later definition never lands on this rule.
  std::string name;
  for (int i = int(rules_.size()); name.empty() || has_rule(name); ++i) name = cat(hint, "/", i);
  rules_.push_back(Rule{name, {}});
  return int32_t(rules_.size() - 1);
}

void GrammarBuilder::add_alternative(int32_t r, Sequence seq) {
  rules_[size_t(r)].alternatives.push_back(std::move(seq));
}

Sequence GrammarBuilder::literal(std::string_view bytes) {
  Sequence s;
  for (unsigned char c : bytes) {
    ByteSet b;
    b.set(c);
    s.push_back(Element::byte_set(b));
  }
  return s;
}

namespace {

ByteSet byte_range(uint32_t lo, uint32_t hi) {
  ByteSet b;
  for (uint32_t c = lo; c <= hi; ++c) b.set(c);
  return b;
}

// The UTF-8 byte-range sequences of codepoints [lo, hi] (utf8-ranges' splitting).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Sequence>* out) {
  static const uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int i = 0; i < 3; ++i) {
    if (lo <= kMax[i] && hi > kMax[i]) {
      utf8_sequences(lo, kMax[i], out);
      utf8_sequences(kMax[i] + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out->push_back({Element::byte_set(byte_range(lo, hi))});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(lo, &a);
  append_utf8(hi, &b);
  Sequence s;
  for (size_t i = 0; i < a.size(); ++i)
    s.push_back(Element::byte_set(byte_range(uint8_t(a[i]), uint8_t(b[i]))));
  out->push_back(std::move(s));
}

}  // namespace

Element GrammarBuilder::codepoints(std::vector<CodepointRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodepointRange> merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  if (negated) {
    std::vector<CodepointRange> inv;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) inv.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
    merged = std::move(inv);
  }
  // Surrogates are not valid UTF-8.
  std::vector<CodepointRange> valid;
  for (auto [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      valid.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) valid.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) valid.push_back({0xE000, hi});
  }
  ByteSet ascii;
  std::vector<Sequence> alts;
  for (auto [lo, hi] : valid) {
    if (hi < 0x80) {
      ascii |= byte_range(lo, hi);
    } else {
      if (lo < 0x80) {
        ascii |= byte_range(lo, 0x7F);
        lo = 0x80;
      }
      utf8_sequences(lo, hi, &alts);
    }
  }
  if (alts.empty()) return Element::byte_set(ascii);
  if (ascii.any()) alts.insert(alts.begin(), {Element::byte_set(ascii)});
  return choice(std::move(alts), "char");
}

Element GrammarBuilder::choice(std::vector<Sequence> alternatives, const std::string& hint) {
  int32_t r = fresh_rule(hint);
  for (auto& s : alternatives) add_alternative(r, std::move(s));
  return Element::reference(r);
}

Element GrammarBuilder::repeat(const Sequence& item, int64_t min, int64_t max,
                               const std::string& hint) {
  constexpr int64_t kMaxCount = 10000;
  STRATA_CHECK(min >= 0 && min <= kMaxCount && max <= kMaxCount && (max < 0 || max >= min),
               "repetition {", min, ",", max, "} is out of range (counts must be 0..", kMaxCount,
               " with min <= max)");
  Sequence head;
  for (int64_t i = 0; i < min; ++i) head.insert(head.end(), item.begin(), item.end());
  Element tail;
  bool has_tail = true;
  if (max < 0) {
    // star ::= item star | ""
    int32_t star = fresh_rule(hint + "-star");
    Sequence loop = item;
    loop.push_back(Element::reference(star));
    add_alternative(star, std::move(loop));
    add_alternative(star, {});
    tail = Element::reference(star);
  } else if (max > min) {
    // opt_k ::= item opt_{k-1} | "", opt_1 ::= item | ""
    int32_t prev = -1;
    for (int64_t k = 1; k <= max - min; ++k) {
      int32_t opt = fresh_rule(hint + "-opt");
      Sequence s = item;
      if (prev >= 0) s.push_back(Element::reference(prev));
      add_alternative(opt, std::move(s));
      add_alternative(opt, {});
      prev = opt;
    }
    tail = Element::reference(prev);
  } else {
    has_tail = false;
  }
  if (has_tail) head.push_back(tail);
  if (head.size() == 1 && head[0].is_rule()) return head[0];
  return choice({std::move(head)}, hint);
}

Grammar GrammarBuilder::build(int32_t root) const {
  size_t n = rules_.size();
  STRATA_CHECK(root >= 0 && size_t(root) < n, "grammar has no root rule");
  for (const Rule& r : rules_) {
    STRATA_CHECK(!r.alternatives.empty(), "grammar: rule '", r.name, "' is used but not defined");
  }
  // Nullable rules (fixed point), then the left-corner graph: r -> s when s can start r.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules_[r].alternatives) {
        bool all = std::all_of(s.begin(), s.end(),
                               [&](const Element& e) { return e.is_rule() && nullable[size_t(e.rule)]; });
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> corner(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r].alternatives) {
      for (const Element& e : s) {
        if (!e.is_rule()) break;
        corner[r].push_back(e.rule);
        if (!nullable[size_t(e.rule)]) break;
      }
    }
  }
  // Depth-first search for a cycle, with an explicit stack (chains can be 10^4 rules long).
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> stack;  // rule, next corner edge
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    stack.push_back({int32_t(start), 0});
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next == corner[size_t(r)].size()) {
        color[size_t(r)] = 2;
        stack.pop_back();
        continue;
      }
      int32_t s = corner[size_t(r)][next++];
      STRATA_CHECK(color[size_t(s)] != 1, "grammar: rule '", rules_[size_t(s)].name,
                   "' is left-recursive (it can derive itself before any byte, e.g. through a "
                   "repetition of something that can be empty), which is not supported");
      if (color[size_t(s)] == 0) {
        color[size_t(s)] = 1;
        stack.push_back({s, 0});
      }
    }
  }
  Grammar g;
  g.rules_ = rules_;
  g.root_ = root;
  g.flatten();
  return g;
}

void Grammar::flatten() {
  alt_start_.assign(rules_.size(), {});
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Sequence& s : rules_[r].alternatives) {
      alt_start_[r].push_back(int32_t(pos_elem_.size()));
      for (const Element& e : s) {
        pos_elem_.push_back(&e);
        pos_rule_.push_back(int32_t(r));
      }
      pos_elem_.push_back(nullptr);
      pos_rule_.push_back(int32_t(r));
    }
  }
}

namespace {

std::string show_bytes(const ByteSet& b) {
  if (b.count() == 1) {
    for (int c = 0; c < 256; ++c) {
      if (!b.test(size_t(c))) continue;
      if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') return cat('"', char(c), '"');
      char buf[8];
      std::snprintf(buf, sizeof buf, "\"\\x%02X\"", c);
      return buf;
    }
  }
  std::string out = "[";
  for (int c = 0; c < 256;) {
    if (!b.test(size_t(c))) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < 256 && b.test(size_t(e + 1))) ++e;
    char buf[24];
    if (e == c) std::snprintf(buf, sizeof buf, "\\x%02X", c);
    else std::snprintf(buf, sizeof buf, "\\x%02X-\\x%02X", c, e);
    out += buf;
    c = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules_) {
    out += r.name + " ::=";
    for (size_t a = 0; a < r.alternatives.size(); ++a) {
      if (a) out += " |";
      if (r.alternatives[a].empty()) out += " \"\"";
      for (const Element& e : r.alternatives[a])
        out += " " + (e.is_rule() ? rules_[size_t(e.rule)].name : show_bytes(e.bytes));
    }
    out += "\n";
  }
  return out;
}

}  // namespace strata::grammar
