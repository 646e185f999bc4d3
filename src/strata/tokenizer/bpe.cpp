#include "strata/tokenizer/bpe.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/tokenizer/unicode.h"

namespace strata::tok {

using json = nlohmann::json;

bool WordCache::lookup(std::string_view word, std::vector<int32_t>* out) const {
  const Ref* r = map_.find(word);
  if (!r) return false;
  out->insert(out->end(), ids_.begin() + r->off, ids_.begin() + r->off + r->len);
  return true;
}

void WordCache::store(std::string_view word, const int32_t* ids, size_t n) {
  if (word.size() > kMaxWordBytes) return;
  if (map_.size() >= kMaxEntries) {
    map_.clear();
    ids_.clear();
  }
  map_.put(word, Ref{uint32_t(ids_.size()), uint32_t(n)});
  ids_.insert(ids_.end(), ids, ids + n);
}

namespace {

constexpr int64_t kMaxId = 1 << 24;  // far above any real vocabulary

std::string byte_token(uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  std::string s = "<0x";
  s += hex[b >> 4];
  s += hex[b & 15];
  s += '>';
  return s;
}

std::optional<std::string> opt_string(const json& m, const char* key, const std::string& where) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(where, ".", key, ": expected a string or null");
  return it->get<std::string>();
}

bool opt_bool(const json& m, const char* key, const std::string& where) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return false;
  if (!it->is_boolean()) fail(where, ".", key, ": expected true or false");
  return it->get<bool>();
}

}  // namespace

BpeModel::BpeModel(const json& model, const std::string& where, bool byte_level) {
  if (!model.is_object()) fail(where, ": expected an object");
  std::string type = model.contains("type") && model["type"].is_string()
                         ? model["type"].get<std::string>()
                         : std::string(model.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    fail(where, ".type: unsupported model type '", type,
         "' (only byte-level BPE is supported; WordPiece, Unigram and WordLevel are not)");
  }
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null()) {
    if (!dropout->is_number()) fail(where, ".dropout: expected a number or null");
    double p = dropout->get<double>();
    if (p < 0.0 || p > 1.0) fail(where, ".dropout: must lie in [0, 1]");
    if (p > 0.0) fail(where, ".dropout: BPE dropout is not supported (encoding must be exact)");
  }
  auto vit = model.find("vocab");
  if (vit == model.end() || !vit->is_object()) fail(where, ".vocab: expected an object");
  vocab_ = StrMap<int32_t>(vit->size());
  int64_t max_id = -1;
  for (auto& [tok, idv] : vit->items()) {
    if (!idv.is_number_integer()) fail(where, ".vocab[\"", tok, "\"]: expected an integer id");
    int64_t id = idv.get<int64_t>();
    if (id < 0 || id >= kMaxId) fail(where, ".vocab[\"", tok, "\"]: id ", id, " out of range");
    vocab_.put(tok, int32_t(id));
    max_id = std::max(max_id, id);
  }
  vocab_count_ = vocab_.size();
  id_to_token_.assign(size_t(max_id + 1), std::string());
  has_id_.assign(size_t(max_id + 1), 0);
  for (auto& [tok, idv] : vit->items()) {
    auto id = size_t(idv.get<int64_t>());
    id_to_token_[id] = tok;
    has_id_[id] = 1;
  }

  prefix_ = opt_string(model, "continuing_subword_prefix", where).value_or("");
  suffix_ = opt_string(model, "end_of_word_suffix", where).value_or("");
  fuse_unk_ = opt_bool(model, "fuse_unk", where);
  byte_fallback_ = opt_bool(model, "byte_fallback", where);
  ignore_merges_ = opt_bool(model, "ignore_merges", where);
  if (auto unk = opt_string(model, "unk_token", where)) {
    const int32_t* id = vocab_.find(*unk);
    if (!id) fail(where, ".unk_token: '", *unk, "' is not in ", where, ".vocab");
    unk_id_ = *id;
  }

  // Merges: ["a b", ...] or [["a", "b"], ...]; "#version" lines are skipped as in HF.
  auto mit = model.find("merges");
  if (mit == model.end() || mit->is_null()) {
    merges_.reserve(16);
  } else {
    if (!mit->is_array()) fail(where, ".merges: expected an array");
    merges_.reserve(mit->size());
    int32_t rank = 0;
    std::string a, b;
    for (size_t i = 0; i < mit->size(); ++i) {
      const json& m = (*mit)[i];
      if (m.is_string()) {
        const std::string& line = m.get_ref<const std::string&>();
        if (line.rfind("#version", 0) == 0) continue;
        size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
          fail(where, ".merges[", i, "]: '", line, "' is not two tokens separated by one space");
        }
        a = line.substr(0, sp);
        b = line.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        fail(where, ".merges[", i, "]: expected \"a b\" or [\"a\", \"b\"]");
      }
      const int32_t* ia = vocab_.find(a);
      const int32_t* ib = vocab_.find(b);
      if (!ia) fail(where, ".merges[", i, "]: token '", a, "' is not in ", where, ".vocab");
      if (!ib) fail(where, ".merges[", i, "]: token '", b, "' is not in ", where, ".vocab");
      std::string joined = a + b.substr(std::min(prefix_.size(), b.size()));
      const int32_t* in = vocab_.find(joined);
      if (!in) {
        fail(where, ".merges[", i, "]: merged token '", joined, "' is not in ", where, ".vocab");
      }
      merges_.put(*ia, *ib, Merge{rank++, *in});
    }
  }

  // Byte-level words can skip the alphabet mapping when every byte has its own token.
  if (byte_level) {
    map_bytes_ = true;
    bool fast = prefix_.empty() && suffix_.empty();
    const auto& b2c = byte_to_char();
    for (int b = 0; b < 256 && fast; ++b) {
      std::string s;
      utf8_append(&s, b2c[size_t(b)]);
      const int32_t* id = vocab_.find(s);
      if (id)
        byte_init_[b] = {*id};
      else
        fast = false;
    }
    if (fast) {
      byte_level_fast_ = true;
      map_bytes_ = false;
      raw_vocab_ = StrMap<int32_t>(vocab_count_);
      for (auto& [tok, idv] : vit->items()) {
        std::string raw;
        bool ok = true;
        for (size_t i = 0; i < tok.size() && ok;) {
          int len;
          uint32_t cp = utf8_decode(tok.data() + i, &len);
          i += size_t(len);
          int byte = char_to_byte(cp);
          if (byte < 0)
            ok = false;
          else
            raw.push_back(char(byte));
        }
        if (ok) raw_vocab_.put(raw, idv.get<int32_t>());
      }
    }
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t* id = vocab_.find(token);
  if (!id) return std::nullopt;
  return *id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= has_id_.size() || !has_id_[size_t(id)]) return nullptr;
  return &id_to_token_[size_t(id)];
}

void BpeModel::initial_symbols_chars(std::string_view w, std::vector<int32_t>* syms) const {
  // Mirrors HF BPE::merge_word: each character (with prefix/suffix) or its byte fallback,
  // else unk (fused when fuse_unk), else dropped.
  int32_t pending_unk = -1;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    int len = utf8_len(uint8_t(w[i]));
    std::string_view ch = w.substr(i, size_t(len));
    bool first = i == 0;
    i += size_t(len);
    bool last = i >= w.size();
    std::string_view key = ch;
    if ((!first && !prefix_.empty()) || (last && !suffix_.empty())) {
      s.clear();
      if (!first) s += prefix_;
      s += ch;
      if (last) s += suffix_;
      key = s;
    }
    if (const int32_t* id = vocab_.find(key)) {
      if (pending_unk >= 0) {
        syms->push_back(pending_unk);
        pending_unk = -1;
      }
      syms->push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      size_t mark = syms->size();
      bool ok = true;
      for (char c : key) {
        const int32_t* id = vocab_.find(byte_token(uint8_t(c)));
        if (!id) {
          ok = false;
          break;
        }
        syms->push_back(*id);
      }
      if (ok) continue;
      syms->resize(mark);
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) syms->push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) syms->push_back(pending_unk);
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>* syms,
                               BpeScratch* scratch) const {
  syms->clear();
  if (byte_level_fast_) {
    syms->resize(word.size());
    for (size_t i = 0; i < word.size(); ++i) (*syms)[i] = byte_init_[uint8_t(word[i])][0];
    return;
  }
  initial_symbols_chars(word, syms);
}

void BpeModel::merge_scan(std::vector<int32_t>* syms, BpeScratch* scratch) const {
  std::vector<int32_t>& s = *syms;
  std::vector<int32_t>& rank = scratch->ranks;
  std::vector<int32_t>& nid = scratch->new_ids;
  size_t n = s.size();
  rank.resize(n);
  nid.resize(n);
  auto pair_at = [&](size_t i) {
    const Merge* m = merges_.find(s[i], s[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    nid[i] = m ? m->new_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_at(i);
  while (n > 1) {
    size_t best = 0;
    int32_t best_rank = rank[0];
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    s[best] = nid[best];
    // Drop symbol best+1 and pair best+1.
    std::copy(s.begin() + long(best) + 2, s.begin() + long(n), s.begin() + long(best) + 1);
    if (best + 2 < n) {
      std::copy(rank.begin() + long(best) + 2, rank.begin() + long(n) - 1,
                rank.begin() + long(best) + 1);
      std::copy(nid.begin() + long(best) + 2, nid.begin() + long(n) - 1,
                nid.begin() + long(best) + 1);
    }
    --n;
    if (best > 0) pair_at(best - 1);
    if (best + 1 < n) pair_at(best);
  }
  s.resize(n);
}

void BpeModel::merge_heap(std::vector<int32_t>* syms, BpeScratch* scratch) const {
  // HF's Word::merge_all: a min-heap of (rank, position) with stale entries skipped.
  std::vector<int32_t>& s = *syms;
  auto n = int32_t(s.size());
  std::vector<int32_t>& prev = scratch->prev;
  std::vector<int32_t>& next = scratch->next;
  std::vector<uint64_t>& heap = scratch->heap;
  prev.resize(size_t(n));
  next.resize(size_t(n));
  heap.clear();
  auto push = [&](int32_t pos, int32_t rank) {
    heap.push_back((uint64_t(uint32_t(rank)) << 32) | uint32_t(pos));
    std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
    if (i + 1 < n) {
      if (const Merge* m = merges_.find(s[size_t(i)], s[size_t(i) + 1])) push(i, m->rank);
    }
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
    uint64_t top = heap.back();
    heap.pop_back();
    auto pos = size_t(uint32_t(top));
    auto rank = int32_t(top >> 32);
    if (s[pos] < 0 || next[pos] < 0) continue;
    auto nx = size_t(next[pos]);
    const Merge* m = merges_.find(s[pos], s[nx]);
    if (!m || m->rank != rank) continue;  // stale entry
    s[pos] = m->new_id;
    s[nx] = -1;
    next[pos] = next[nx];
    if (next[nx] >= 0) prev[size_t(next[nx])] = int32_t(pos);
    if (prev[pos] >= 0) {
      auto pv = size_t(prev[pos]);
      if (const Merge* mp = merges_.find(s[pv], s[pos])) push(int32_t(pv), mp->rank);
    }
    if (next[pos] >= 0) {
      if (const Merge* mn = merges_.find(s[pos], s[size_t(next[pos])])) {
        push(int32_t(pos), mn->rank);
      }
    }
  }
  s.erase(std::remove(s.begin(), s.end(), -1), s.end());
}

void BpeModel::merge(std::vector<int32_t>* syms, BpeScratch* scratch, bool force_heap) const {
  if (syms->size() < 2) return;
  if (force_heap || syms->size() > 96) {
    merge_heap(syms, scratch);
  } else {
    merge_scan(syms, scratch);
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* out, BpeScratch* scratch,
                        WordCache* cache) const {
  if (word.empty()) return;
  if (cache && word.size() <= WordCache::kMaxWordBytes && cache->lookup(word, out)) return;
  size_t start = out->size();
  std::string_view w = word;
  if (map_bytes_) {
    scratch->mapped.clear();
    const auto& b2c = byte_to_char();
    for (char c : word) utf8_append(&scratch->mapped, b2c[uint8_t(c)]);
    w = scratch->mapped;
  }
  const int32_t* whole = nullptr;
  if (ignore_merges_) whole = byte_level_fast_ ? raw_vocab_.find(w) : vocab_.find(w);
  if (whole) {
    out->push_back(*whole);
  } else {
    initial_symbols(w, &scratch->syms, scratch);
    merge(&scratch->syms, scratch, false);
    out->insert(out->end(), scratch->syms.begin(), scratch->syms.end());
  }
  if (cache) cache->store(word, out->data() + start, out->size() - start);
}

}  // namespace strata::tok
