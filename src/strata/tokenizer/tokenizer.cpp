#include "strata/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer_impl.h"

namespace strata {

using json = nlohmann::json;
using tok::AddedSplit;
using tok::AddedTokenSpec;
using tok::Span;
using tok::TokenizerImpl;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(p.string(), ": cannot open file");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool get_flag(const json& t, const char* key, bool def, const std::string& where) {
  auto it = t.find(key);
  if (it == t.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(where, ".", key, ": expected true or false");
  return it->get<bool>();
}

// HF AddedVocabulary::add_tokens for one token at a time, in file order.
void add_tokens(TokenizerImpl* impl, const json& arr, const std::string& where) {
  if (arr.is_null()) return;
  if (!arr.is_array()) fail(where, ": expected an array");
  std::vector<AddedTokenSpec> special_list, added_list;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    std::string w = cat(where, "[", i, "]");
    if (!t.is_object()) fail(w, ": expected an object");
    if (!t.contains("content") || !t["content"].is_string()) fail(w, ".content: expected a string");
    AddedTokenSpec spec;
    spec.content = t["content"].get<std::string>();
    spec.special = get_flag(t, "special", false, w);
    spec.single_word = get_flag(t, "single_word", false, w);
    spec.lstrip = get_flag(t, "lstrip", false, w);
    spec.rstrip = get_flag(t, "rstrip", false, w);
    spec.normalized = get_flag(t, "normalized", !spec.special, w);
    if (t.contains("id") && !t["id"].is_number_integer()) fail(w, ".id: expected an integer");
    if (spec.content.empty()) continue;
    if (spec.special && !impl->special_contents.count(spec.content)) {
      special_list.push_back(spec);
      impl->special_contents.insert(spec.content);
    }
    bool same = std::any_of(impl->added_by_id.begin(), impl->added_by_id.end(), [&](auto& kv) {
      const AddedTokenSpec& o = kv.second;
      return o.content == spec.content && o.special == spec.special &&
             o.single_word == spec.single_word && o.lstrip == spec.lstrip &&
             o.rstrip == spec.rstrip && o.normalized == spec.normalized;
    });
    if (same) continue;
    int32_t id;
    if (auto it = impl->added_by_content.find(spec.content); it != impl->added_by_content.end()) {
      id = it->second;
    } else if (auto mid = impl->model.token_to_id(spec.content)) {
      id = *mid;
    } else {
      int32_t vs = impl->model.vocab_size();
      int32_t max = -1;
      for (auto& kv : impl->added_by_content) max = std::max(max, kv.second);
      id = (max < 0) ? vs : ((max >= vs || vs == 0) ? max + 1 : vs);
    }
    spec.id = id;
    impl->added_by_content[spec.content] = id;
    impl->added_by_id[id] = spec;
    if (!impl->special_contents.count(spec.content)) added_list.push_back(spec);
  }
  // Matchers: specials then the others, split by `normalized`.
  std::vector<std::string> raw_p, norm_p;
  std::vector<const AddedTokenSpec*> raw_t, norm_t;
  std::string buf;
  for (const auto* list : {&special_list, &added_list}) {
    for (const AddedTokenSpec& s : *list) {
      int32_t id = impl->added_by_content.at(s.content);
      const AddedTokenSpec* flags = &impl->added_by_id.at(id);
      if (s.normalized) {
        norm_p.emplace_back(impl->normalizer.apply(s.content, &buf));
        norm_t.push_back(flags);
      } else {
        raw_p.push_back(s.content);
        raw_t.push_back(flags);
      }
    }
  }
  impl->raw_matcher.build(std::move(raw_p), std::move(raw_t));
  impl->norm_matcher.build(std::move(norm_p), std::move(norm_t));
  for (auto& [id, s] : impl->added_by_id) {
    impl->added_list.push_back(AddedToken{s.content, id,
                                          impl->special_contents.count(s.content) > 0,
                                          s.single_word, s.lstrip, s.rstrip, s.normalized});
  }
  std::sort(impl->added_list.begin(), impl->added_list.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
}

std::vector<int32_t> special_ids(TokenizerImpl* impl, const json& sp, const std::string& name,
                                 const std::string& where) {
  auto it = sp.find(name);
  if (it == sp.end() || !it->is_object() || !it->contains("ids") || !(*it)["ids"].is_array()) {
    fail(where, ": special token '", name, "' is not in special_tokens");
  }
  std::vector<int32_t> ids;
  for (const json& v : (*it)["ids"]) {
    if (!v.is_number_integer())
      fail(where, ".special_tokens[\"", name, "\"].ids: expected integers");
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

void parse_post(TokenizerImpl* impl, const json& j, const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    fail(where, ": expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) fail(where, ".processors: expected an array");
    for (size_t i = 0; i < it->size(); ++i)
      parse_post(impl, (*it)[i], cat(where, ".processors[", i, "]"));
    return;
  }
  tok::PostTemplate t;
  if (type == "TemplateProcessing") {
    auto single = j.find("single");
    if (single == j.end() || !single->is_array()) fail(where, ".single: expected an array");
    const json empty = json::object();
    const json& sp = j.contains("special_tokens") ? j["special_tokens"] : empty;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      std::string w = cat(where, ".single[", i, "]");
      if (item.contains("Sequence")) {
        t.items.push_back({true, {}});
      } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
                 item["SpecialToken"]["id"].is_string()) {
        t.items.push_back({false, special_ids(impl, sp, item["SpecialToken"]["id"], where)});
      } else {
        fail(w, ": expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto pair_id = [&](const char* key) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        fail(where, ".", key, ": expected [token, id]");
      }
      return (*it)[1].get<int32_t>();
    };
    t.items = {{false, {pair_id("cls")}}, {true, {}}, {false, {pair_id("sep")}}};
  } else {
    fail(where, ".type: unsupported post-processor '", type,
         "' (supported: TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, ",
         "Sequence)");
  }
  impl->post.push_back(std::move(t));
}

void apply_post(const std::vector<tok::PostTemplate>& post, std::vector<int32_t>* ids,
                size_t start) {
  std::vector<int32_t> seq, next;
  for (const auto& t : post) {
    seq.assign(ids->begin() + long(start), ids->end());
    next.clear();
    for (const auto& item : t.items) {
      const auto& src = item.is_sequence ? seq : item.ids;
      next.insert(next.end(), src.begin(), src.end());
    }
    ids->resize(start);
    ids->insert(ids->end(), next.begin(), next.end());
  }
}

}  // namespace

namespace tok {

const std::string* TokenizerImpl::token_of(int32_t id) const {
  if (auto it = added_by_id.find(id); it != added_by_id.end()) return &it->second.content;
  return model.id_to_token(id);
}

void TokenizerImpl::encode_text(std::string* pool, Span piece, std::vector<int32_t>* out,
                                EncodeScratch* s, WordCache* cache) const {
  s->words.clear();
  pre.run(pool, piece, &s->words);
  for (Span w : s->words) {
    model.tokenize(std::string_view(pool->data() + w.off, w.len), out, &s->bpe, cache);
  }
}

void TokenizerImpl::encode(std::string_view text, bool add_special, std::vector<int32_t>* out,
                           EncodeScratch* s, WordCache* cache) const {
  size_t bad = utf8_valid_prefix(text);
  if (bad != text.size()) fail("tokenizer: input is not valid UTF-8 (byte ", bad, ")");
  size_t start = out->size();
  std::string& pool = s->pool;
  pool.assign(text);
  s->raw_splits.clear();
  if (raw_matcher.empty()) {
    if (!text.empty()) s->raw_splits.push_back(AddedSplit{0, uint32_t(text.size()), -1});
  } else {
    raw_matcher.split(text, 0, &s->raw_splits);
  }
  for (const AddedSplit& rs : s->raw_splits) {
    if (rs.id >= 0) {
      out->push_back(rs.id);
      continue;
    }
    Span piece{rs.off, rs.len};
    if (!normalizer.identity()) {
      std::string_view v(pool.data() + rs.off, rs.len);
      std::string_view n = normalizer.apply(v, &s->norm);
      if (n.data() != v.data()) {
        piece = Span{uint32_t(pool.size()), uint32_t(n.size())};
        pool.append(n);
      }
    }
    if (piece.len == 0) continue;
    if (norm_matcher.empty()) {
      encode_text(&pool, piece, out, s, cache);
      continue;
    }
    s->norm_splits.clear();
    norm_matcher.split(std::string_view(pool.data() + piece.off, piece.len), piece.off,
                       &s->norm_splits);
    // encode_text may grow the pool; the splits hold offsets, so they stay valid.
    for (size_t i = 0; i < s->norm_splits.size(); ++i) {
      AddedSplit ns = s->norm_splits[i];
      if (ns.id >= 0) {
        out->push_back(ns.id);
      } else {
        encode_text(&pool, Span{ns.off, ns.len}, out, s, cache);
      }
    }
  }
  if (add_special) apply_post(post, out, start);
}

}  // namespace tok

namespace {

std::shared_ptr<TokenizerImpl> parse_tokenizer(std::string_view json_text,
                                               const std::string& name) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail(name, ": malformed JSON: ", e.what());
  }
  if (!j.is_object()) fail(name, ": expected a JSON object");
  auto field = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = j.find(key);
    return it == j.end() ? null_value : *it;
  };
  if (!j.contains("model")) fail(name, ": model: missing");
  tok::Normalizer normalizer(field("normalizer"), name + ": normalizer");
  tok::PreTokenizer pre(field("pre_tokenizer"), name + ": pre_tokenizer");
  auto impl = std::make_shared<TokenizerImpl>(
      tok::BpeModel(j["model"], name + ": model", pre.byte_level()));
  impl->name = name;
  impl->normalizer = std::move(normalizer);
  impl->pre = std::move(pre);
  add_tokens(impl.get(), field("added_tokens"), name + ": added_tokens");
  parse_post(impl.get(), field("post_processor"), name + ": post_processor");

  int32_t n = impl->model.id_limit();
  for (auto& kv : impl->added_by_id) n = std::max(n, kv.first + 1);
  impl->total_vocab = n;
  const TokenizerImpl* raw = impl.get();
  impl->decode_table = tok::DecodeTable(
      field("decoder"), name + ": decoder", n, [raw](int32_t id) { return raw->token_of(id); },
      [raw](int32_t id) {
        const std::string* t = raw->token_of(id);
        return t && raw->special_contents.count(*t) > 0;
      });
  return impl;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& name) {
  return Tokenizer(parse_tokenizer(json_text, name));
}

Tokenizer Tokenizer::load(const std::filesystem::path& dir) {
  std::filesystem::path file = dir / "tokenizer.json";
  if (!std::filesystem::exists(file)) fail(file.string(), ": file not found");
  std::shared_ptr<TokenizerImpl> impl = parse_tokenizer(read_file(file), file.string());
  TokenizerConfig c = TokenizerConfig::load(dir);
  Tokenizer t(impl);
  auto resolve = [&](const std::optional<std::string>& s, std::optional<int32_t>* id) {
    if (s) *id = t.token_to_id(*s);
  };
  resolve(c.bos_token, &c.bos_id);
  resolve(c.eos_token, &c.eos_id);
  resolve(c.pad_token, &c.pad_id);
  resolve(c.unk_token, &c.unk_id);
  impl->config = std::move(c);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> out;
  encode(text, add_special, &out);
  return out;
}

void Tokenizer::encode(std::string_view text, bool add_special, std::vector<int32_t>* out) const {
  // Each thread takes a free cache slot; when all are busy it works without a cache.
  for (auto& slot : impl_->slots) {
    std::unique_lock<std::mutex> lock(slot.mu, std::try_to_lock);
    if (!lock.owns_lock()) continue;
    impl_->encode(text, add_special, out, &slot.scratch, &slot.cache);
    return;
  }
  tok::EncodeScratch scratch;
  impl_->encode(text, add_special, out, &scratch, nullptr);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  tok::DecodeStream stream;
  for (int32_t id : ids) stream.push(impl_->decode_table, id, skip_special, &out);
  stream.finish(impl_->decode_table, &out);
  return out;
}

int32_t Tokenizer::vocab_size() const { return impl_->total_vocab; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token));
      it != impl_->added_by_content.end()) {
    return it->second;
  }
  return impl_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = impl_->token_of(id);
  if (!t) return std::nullopt;
  return *t;
}

bool Tokenizer::is_special(int32_t id) const {
  const std::string* t = impl_->token_of(id);
  return t && impl_->special_contents.count(*t) > 0;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const tok::DecodeTable& t = impl_->decode_table;
  switch (t.kind(id)) {
    case tok::DecodeTable::kText: return std::string(t.text(id));
    case tok::DecodeTable::kByte: return std::string(1, char(t.byte(id)));
    default: return "";
  }
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added_list; }

const TokenizerConfig& Tokenizer::config() const { return impl_->config; }

std::vector<int32_t> Tokenizer::special_prefix() const {
  std::vector<int32_t> ids = {-1};
  apply_post(impl_->post, &ids, 0);
  return std::vector<int32_t>(ids.begin(), std::find(ids.begin(), ids.end(), -1));
}

std::vector<int32_t> Tokenizer::special_suffix() const {
  std::vector<int32_t> ids = {-1};
  apply_post(impl_->post, &ids, 0);
  auto it = std::find(ids.begin(), ids.end(), -1);
  return it == ids.end() ? std::vector<int32_t>() : std::vector<int32_t>(it + 1, ids.end());
}

struct IncrementalDecoder::State {
  tok::DecodeStream stream;
};

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : impl_(tokenizer.impl_), state_(std::make_unique<State>()), skip_special_(skip_special) {}
IncrementalDecoder::~IncrementalDecoder() = default;
IncrementalDecoder::IncrementalDecoder(IncrementalDecoder&&) noexcept = default;
IncrementalDecoder& IncrementalDecoder::operator=(IncrementalDecoder&&) noexcept = default;

void IncrementalDecoder::push(int32_t id, std::string* out) {
  state_->stream.push(impl_->decode_table, id, skip_special_, out);
}

std::string IncrementalDecoder::push(int32_t id) {
  std::string out;
  push(id, &out);
  return out;
}

void IncrementalDecoder::finish(std::string* out) {
  state_->stream.finish(impl_->decode_table, out);
}

std::string IncrementalDecoder::finish() {
  std::string out;
  finish(&out);
  return out;
}

void IncrementalDecoder::reset() { state_->stream.reset(); }

}  // namespace strata
