#include "strata/tokenizer/pretokenizer.h"

#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/tokenizer/icu.h"
#include "strata/tokenizer/regex.h"
#include "strata/tokenizer/unicode.h"

namespace strata::tok {

using json = nlohmann::json;

namespace {

enum class Behavior : uint8_t {
  kRemoved,
  kIsolated,
  kMergedWithPrevious,
  kMergedWithNext,
  kContiguous
};

struct Piece {
  uint32_t s, e;
  bool match;
};

Behavior parse_behavior(const json& j, const std::string& where) {
  if (!j.is_string()) fail(where, ": expected a string");
  const std::string b = j.get<std::string>();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  fail(where, ": unknown split behavior '", b, "'");
}

// HF NormalizedString::split: applies the delimiter behavior to the (offsets, is_match) list
// and appends the kept, non-empty pieces to out.
void apply_behavior(std::vector<Piece>& ms, Behavior b, bool invert, uint32_t base,
                    std::vector<Span>* out) {
  if (invert) {
    for (Piece& m : ms) m.match = !m.match;
  }
  auto push = [&](uint32_t s, uint32_t e) {
    if (e > s) out->push_back(Span{base + s, e - s});
  };
  switch (b) {
    case Behavior::kIsolated:
      for (const Piece& m : ms) push(m.s, m.e);
      return;
    case Behavior::kRemoved:
      for (const Piece& m : ms) {
        if (!m.match) push(m.s, m.e);
      }
      return;
    case Behavior::kMergedWithPrevious:
    case Behavior::kContiguous: {
      size_t first = out->size();
      bool prev_match = false, any = false;
      uint32_t cs = 0, ce = 0;
      for (const Piece& m : ms) {
        bool merge = b == Behavior::kContiguous ? m.match == prev_match : (m.match && !prev_match);
        if (merge && any) {
          ce = m.e;
        } else {
          if (any) push(cs, ce);
          cs = m.s;
          ce = m.e;
          any = true;
        }
        prev_match = m.match;
      }
      if (any) push(cs, ce);
      (void)first;
      return;
    }
    case Behavior::kMergedWithNext: {
      // Folded from the right, as HF does.
      size_t first = out->size();
      bool prev_match = false, any = false;
      uint32_t cs = 0, ce = 0;
      for (size_t i = ms.size(); i-- > 0;) {
        const Piece& m = ms[i];
        if (m.match && !prev_match && any) {
          cs = m.s;
        } else {
          if (any) push(cs, ce);
          cs = m.s;
          ce = m.e;
          any = true;
        }
        prev_match = m.match;
      }
      if (any) push(cs, ce);
      std::reverse(out->begin() + long(first), out->end());
      return;
    }
  }
}

// Pattern::find_matches for a character predicate: each matching char is one match.
template <class Pred>
void char_matches(std::string_view text, Pred pred, std::vector<Piece>* ms) {
  uint32_t last = 0;
  for (size_t i = 0; i < text.size();) {
    int len;
    uint32_t cp = utf8_decode(text.data() + i, &len);
    if (pred(cp)) {
      if (last < i) ms->push_back(Piece{last, uint32_t(i), false});
      ms->push_back(Piece{uint32_t(i), uint32_t(i + size_t(len)), true});
      last = uint32_t(i + size_t(len));
    }
    i += size_t(len);
  }
  if (last < text.size()) ms->push_back(Piece{last, uint32_t(text.size()), false});
}

void regex_matches(const Regex& re, std::string_view text, std::vector<Piece>* ms) {
  uint32_t prev = 0;
  re.find_iter(text, [&](size_t s, size_t e) {
    if (prev != s) ms->push_back(Piece{prev, uint32_t(s), false});
    ms->push_back(Piece{uint32_t(s), uint32_t(e), true});
    prev = uint32_t(e);
  });
  if (prev != text.size()) ms->push_back(Piece{prev, uint32_t(text.size()), false});
}

std::string escape_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    auto u = uint8_t(c);
    bool alnum = (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z');
    if (u < 0x80 && !alnum) out += '\\';
    out += c;
  }
  return out;
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct PreTokenizer::Stage {
  enum Kind : uint8_t { kSplit, kDigits, kByteLevel, kWhitespaceSplit, kWhitespace } kind;
  std::unique_ptr<Regex> re;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;
  bool add_prefix_space = false;
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer::PreTokenizer(const json& j, const std::string& where) {
  parse(j, where);
  for (size_t i = 0; i + 1 < stages_.size(); ++i) {
    if (stages_[i]->kind == Stage::kByteLevel) {
      fail(where, ": a ByteLevel pre-tokenizer must be the last one of the sequence");
    }
  }
  byte_level_ = !stages_.empty() && stages_.back()->kind == Stage::kByteLevel;
}

void PreTokenizer::parse(const json& j, const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    fail(where, ": expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  auto flag = [&](const char* key, bool def) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return def;
    if (!it->is_boolean()) fail(where, ".", key, ": expected true or false");
    return it->get<bool>();
  };
  auto st = std::make_unique<Stage>();
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) fail(where, ".pretokenizers: expected an array");
    for (size_t i = 0; i < it->size(); ++i) parse((*it)[i], cat(where, ".pretokenizers[", i, "]"));
    return;
  } else if (type == "Split") {
    st->kind = Stage::kSplit;
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object()) {
      fail(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      st->re =
          std::make_unique<Regex>((*pat)["Regex"].get<std::string>(), where + ".pattern.Regex");
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      st->re = std::make_unique<Regex>(escape_literal((*pat)["String"].get<std::string>()),
                                       where + ".pattern.String");
    } else {
      fail(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    }
    if (!j.contains("behavior")) fail(where, ".behavior: missing");
    st->behavior = parse_behavior(j["behavior"], where + ".behavior");
    st->invert = flag("invert", false);
  } else if (type == "Digits") {
    st->kind = Stage::kDigits;
    st->individual_digits = flag("individual_digits", false);
    icu_require(where);
  } else if (type == "ByteLevel") {
    st->kind = Stage::kByteLevel;
    st->add_prefix_space = flag("add_prefix_space", true);
    if (flag("use_regex", true)) st->re = std::make_unique<Regex>(kGpt2Pattern, where);
  } else if (type == "WhitespaceSplit") {
    st->kind = Stage::kWhitespaceSplit;
  } else if (type == "Whitespace") {
    st->kind = Stage::kWhitespace;
    st->re = std::make_unique<Regex>(R"(\w+|[^\w\s]+)", where);
  } else {
    fail(where, ".type: unsupported pre-tokenizer '", type, "' (supported: Split, Digits, ",
         "ByteLevel, Whitespace, WhitespaceSplit, Sequence)");
  }
  stages_.push_back(std::move(st));
}

void PreTokenizer::run(std::string* pool, Span in, std::vector<Span>* out) const {
  thread_local std::vector<Span> cur, next;
  thread_local std::vector<Piece> ms;
  if (in.len == 0) return;
  cur.clear();
  cur.push_back(in);
  for (const auto& st : stages_) {
    if (st->kind == Stage::kByteLevel && !st->add_prefix_space && !st->re) continue;
    next.clear();
    for (Span sp : cur) {
      ms.clear();
      switch (st->kind) {
        case Stage::kSplit:
          regex_matches(*st->re, std::string_view(pool->data() + sp.off, sp.len), &ms);
          apply_behavior(ms, st->behavior, st->invert, sp.off, &next);
          break;
        case Stage::kDigits:
          char_matches(std::string_view(pool->data() + sp.off, sp.len), icu_is_numeric, &ms);
          apply_behavior(ms, st->individual_digits ? Behavior::kIsolated : Behavior::kContiguous,
                         false, sp.off, &next);
          break;
        case Stage::kWhitespaceSplit:
          char_matches(std::string_view(pool->data() + sp.off, sp.len), is_white_space, &ms);
          apply_behavior(ms, Behavior::kRemoved, false, sp.off, &next);
          break;
        case Stage::kWhitespace:
          regex_matches(*st->re, std::string_view(pool->data() + sp.off, sp.len), &ms);
          apply_behavior(ms, Behavior::kRemoved, true, sp.off, &next);
          break;
        case Stage::kByteLevel: {
          if (st->add_prefix_space && (*pool)[sp.off] != ' ') {
            pool->reserve(pool->size() + sp.len + 1);
            uint32_t off = uint32_t(pool->size());
            pool->push_back(' ');
            pool->append(pool->data() + sp.off, sp.len);
            sp = Span{off, sp.len + 1};
          }
          if (st->re) {
            regex_matches(*st->re, std::string_view(pool->data() + sp.off, sp.len), &ms);
            apply_behavior(ms, Behavior::kIsolated, false, sp.off, &next);
          } else {
            next.push_back(sp);
          }
          break;
        }
      }
    }
    cur.swap(next);
  }
  out->insert(out->end(), cur.begin(), cur.end());
}

}  // namespace strata::tok
