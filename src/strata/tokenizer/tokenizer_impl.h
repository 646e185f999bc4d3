// Internal state of strata::Tokenizer, shared with IncrementalDecoder and tests.
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "strata/tokenizer/added_vocab.h"
#include "strata/tokenizer/bpe.h"
#include "strata/tokenizer/decoder.h"
#include "strata/tokenizer/normalizer.h"
#include "strata/tokenizer/pretokenizer.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::tok {

// Reused buffers of one encode call.
struct EncodeScratch {
  std::string pool, norm;
  std::vector<AddedSplit> raw_splits, norm_splits;
  std::vector<Span> words;
  BpeScratch bpe;
};

// One post-processor step: the template of a single sequence. Items with is_sequence insert
// the ids so far; the others insert fixed special ids.
struct PostTemplate {
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  std::vector<Item> items;
};

struct TokenizerImpl {
  explicit TokenizerImpl(BpeModel m) : model(std::move(m)) {}

  std::string name;  // file name for messages
  Normalizer normalizer;
  PreTokenizer pre;
  BpeModel model;
  // Added tokens by id (HF added_tokens_map_r) and by content.
  std::unordered_map<int32_t, AddedTokenSpec> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_set<std::string> special_contents;
  std::vector<AddedToken> added_list;  // sorted by id
  AddedMatcher raw_matcher, norm_matcher;
  std::vector<PostTemplate> post;
  DecodeTable decode_table;
  TokenizerConfig config;
  int32_t total_vocab = 0;

  struct CacheSlot {
    std::mutex mu;
    WordCache cache;
    EncodeScratch scratch;
  };
  mutable std::array<CacheSlot, 4> slots;

  const std::string* token_of(int32_t id) const;
  void encode(std::string_view text, bool add_special, std::vector<int32_t>* out, EncodeScratch* s,
              WordCache* cache) const;
  void encode_text(std::string* pool, Span piece, std::vector<int32_t>* out, EncodeScratch* s,
                   WordCache* cache) const;
};

}  // namespace strata::tok
