// The BPE model of tokenizer.json ("type": "BPE"), with results identical to HF tokenizers:
// merges by rank (lowest first, leftmost on ties), ignore_merges, byte_fallback, unk_token.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tokenizer/flat_map.h"

namespace strata::tok {

// Word -> ids memo. Not thread-safe; the tokenizer hands one to one thread at a time.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kMaxEntries = 1 << 17;
  bool lookup(std::string_view word, std::vector<int32_t>* out) const;
  void store(std::string_view word, const int32_t* ids, size_t n);

 private:
  struct Ref {
    uint32_t off, len;
  };
  StrMap<Ref> map_{1024};
  std::vector<int32_t> ids_;
};

// Scratch space reused across words so that the hot loop does not allocate.
struct BpeScratch {
  std::vector<int32_t> syms, ranks, new_ids, prev, next;
  std::vector<uint64_t> heap;
  std::string mapped;
};

class BpeModel {
 public:
  // Parses `model` (the "model" object of tokenizer.json); `where` prefixes error messages.
  // byte_level: words arrive as raw bytes that the ByteLevel pre-tokenizer would map.
  BpeModel(const nlohmann::json& model, const std::string& where, bool byte_level);

  // HF Model::get_vocab_size: the number of vocab entries.
  int32_t vocab_size() const { return int32_t(vocab_count_); }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Largest vocab id + 1.
  int32_t id_limit() const { return int32_t(has_id_.size()); }
  // The vocab string of id, or nullptr.
  const std::string* id_to_token(int32_t id) const;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>* out, BpeScratch* scratch,
                WordCache* cache) const;

  // Merges symbols in place (exposed so tests can compare the scan and heap strategies).
  void merge(std::vector<int32_t>* syms, BpeScratch* scratch, bool force_heap) const;

 private:
  void initial_symbols(std::string_view word, std::vector<int32_t>* syms,
                       BpeScratch* scratch) const;
  void initial_symbols_chars(std::string_view word, std::vector<int32_t>* syms) const;
  void merge_scan(std::vector<int32_t>* syms, BpeScratch* scratch) const;
  void merge_heap(std::vector<int32_t>* syms, BpeScratch* scratch) const;

  StrMap<int32_t> vocab_{16};      // token string -> id
  StrMap<int32_t> raw_vocab_{16};  // byte-level mode: raw bytes -> id
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_id_;
  size_t vocab_count_ = 0;
  PairMap merges_;
  bool byte_level_fast_ = false;  // words are raw bytes; symbols start from byte_init_
  bool map_bytes_ = false;        // byte-level words mapped to the alphabet before lookup
  std::vector<int32_t> byte_init_[256];
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string prefix_, suffix_;
};

}  // namespace strata::tok
