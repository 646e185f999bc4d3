#include "strata/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "strata/core/error.h"

namespace strata::tok {

using json = nlohmann::json;

void byte_level_decode(std::string_view token, std::string* out) {
  size_t mark = out->size();
  for (size_t i = 0; i < token.size();) {
    int len;
    uint32_t cp = utf8_decode(token.data() + i, &len);
    i += size_t(len);
    int b = char_to_byte(cp);
    if (b < 0) {
      out->resize(mark);
      out->append(token);
      return;
    }
    out->push_back(char(b));
  }
}

namespace {

// HF ByteFallback: "<0xHH>" (six bytes) is a byte token.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void flatten(const json& j, const std::string& where, std::vector<std::string>* types) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    fail(where, ": expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) fail(where, ".decoders: expected an array");
    for (size_t i = 0; i < it->size(); ++i)
      flatten((*it)[i], cat(where, ".decoders[", i, "]"), types);
    return;
  }
  if (type != "ByteLevel" && type != "ByteFallback" && type != "Fuse") {
    fail(where, ".type: unsupported decoder '", type,
         "' (supported: ByteLevel, ByteFallback, Fuse, Sequence)");
  }
  types->push_back(type);
}

}  // namespace

DecodeTable::DecodeTable(const json& decoder, const std::string& where, int32_t n_ids,
                         const std::function<const std::string*(int32_t)>& token_of,
                         const std::function<bool(int32_t)>& special) {
  std::vector<std::string> types;
  flatten(decoder, where, &types);
  join_space_ = decoder.is_null();
  bool seen_fuse = false;
  for (const std::string& t : types) {
    if (t == "ByteLevel") {
      if (byte_level_) fail(where, ": ByteLevel appears twice");
      if (seen_fuse) fail(where, ": Fuse before ByteLevel is not supported");
      byte_level_ = true;
    } else if (t == "ByteFallback") {
      if (byte_fallback_) fail(where, ": ByteFallback appears twice");
      if (byte_level_) fail(where, ": ByteFallback after ByteLevel is not supported");
      byte_fallback_ = true;
    } else {
      seen_fuse = true;
    }
  }
  kind_.assign(size_t(n_ids), kUnknown);
  byte_.assign(size_t(n_ids), 0);
  special_.assign(size_t(n_ids), 0);
  off_.assign(size_t(n_ids) + 1, 0);
  for (int32_t id = 0; id < n_ids; ++id) {
    off_[size_t(id)] = uint32_t(bytes_.size());
    const std::string* t = token_of(id);
    if (!t) continue;
    special_[size_t(id)] = special(id) ? 1 : 0;
    int b = byte_fallback_ ? parse_byte_token(*t) : -1;
    if (b >= 0) {
      kind_[size_t(id)] = kByte;
      byte_[size_t(id)] = uint8_t(b);
      continue;
    }
    kind_[size_t(id)] = kText;
    if (byte_level_) {
      byte_level_decode(*t, &bytes_);
    } else {
      bytes_ += *t;
    }
  }
  off_[size_t(n_ids)] = uint32_t(bytes_.size());
}

void DecodeStream::flush_group(const DecodeTable& t, std::string* out) {
  if (group_.empty()) return;
  if (utf8_valid_prefix(group_) == group_.size()) {
    if (t.byte_level()) {
      std::string mapped;
      byte_level_decode(group_, &mapped);
      lossy_.feed(mapped, out);
    } else {
      lossy_.feed(group_, out);
    }
  } else {
    // HF: one U+FFFD per byte of an invalid group.
    for (size_t i = 0; i < group_.size(); ++i) lossy_.feed("\xEF\xBF\xBD", out);
  }
  group_.clear();
}

void DecodeStream::push(const DecodeTable& t, int32_t id, bool skip_special, std::string* out) {
  DecodeTable::Kind k = t.kind(id);
  if (k == DecodeTable::kUnknown) return;
  if (skip_special && t.special(id)) return;
  if (k == DecodeTable::kByte) {
    group_.push_back(char(t.byte(id)));
    return;
  }
  flush_group(t, out);
  if (t.join_space() && !first_) lossy_.feed(" ", out);
  first_ = false;
  lossy_.feed(t.text(id), out);
}

void DecodeStream::finish(const DecodeTable& t, std::string* out) {
  flush_group(t, out);
  lossy_.finish(out);
  first_ = true;
}

void DecodeStream::reset() {
  group_.clear();
  lossy_.reset();
  first_ = true;
}

}  // namespace strata::tok
