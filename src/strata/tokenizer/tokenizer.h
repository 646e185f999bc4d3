// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, encoding and decoding
// exactly as HF tokenizers' Rust core does; the model directory's tokenizer_config.json,
// chat_template.jinja and generation_config.json; and a streaming detokenizer.
//
//   strata::Tokenizer tok = strata::Tokenizer::load("/models/qwen3");
//   std::vector<int32_t> ids = tok.encode("Hello world");
//   std::string text = tok.decode(ids);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// tokenizer_config.json (and chat_template.jinja / chat_template.json beside it).
struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  // The ids of those tokens in the tokenizer's vocabulary, when present there.
  std::optional<int32_t> bos_id, eos_id, pad_id, unk_id;
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::string tokenizer_class;
  // The default chat template ("" when none) and all named ones ("default" included).
  std::string chat_template;
  std::map<std::string, std::string> chat_templates;

  // Reads dir/tokenizer_config.json when present (all fields optional) and the chat template
  // files; throws strata::Error naming the file and field when one is malformed.
  static TokenizerConfig load(const std::filesystem::path& dir);
};

// generation_config.json: the model's sampling defaults. Absent fields stay empty.
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id, pad_token_id;
  std::optional<float> temperature, top_p, repetition_penalty;
  std::optional<int32_t> top_k, max_new_tokens, max_length;
  std::optional<bool> do_sample;

  // Reads dir/generation_config.json; a missing file gives empty defaults.
  static GenerationConfig load(const std::filesystem::path& dir);
};

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Loads dir/tokenizer.json and the config files beside it.
  static Tokenizer load(const std::filesystem::path& dir);
  // Parses tokenizer.json text; `name` is used in error messages.
  static Tokenizer from_json(std::string_view json_text,
                             const std::string& name = "tokenizer.json");

  // Encodes valid UTF-8 text (throws strata::Error on invalid UTF-8). add_special applies the
  // tokenizer.json post-processor (e.g. a TemplateProcessing BOS), as HF's add_special_tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;
  // Appends to *out instead.
  void encode(std::string_view text, bool add_special, std::vector<int32_t>* out) const;

  // HF decode: unknown ids are dropped; skip_special drops special added tokens.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Highest id + 1 over the model and the added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // The bytes that id adds to decoded text (its ByteLevel-decoded bytes, or its fallback byte);
  // "" for an id outside the vocabulary. A grammar matches generated text through these.
  std::string token_bytes(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  const TokenizerConfig& config() const;
  // The ids of the post-processor's special tokens added around a single sequence.
  std::vector<int32_t> special_prefix() const;
  std::vector<int32_t> special_suffix() const;

 private:
  friend class IncrementalDecoder;
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

// Streams the text of ids appended one at a time. It never emits part of a UTF-8 character,
// and the concatenation of everything push() and finish() return equals
// tokenizer.decode(all ids, skip_special).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  ~IncrementalDecoder();
  IncrementalDecoder(IncrementalDecoder&&) noexcept;
  IncrementalDecoder& operator=(IncrementalDecoder&&) noexcept;

  // Appends the text completed by id to *out.
  void push(int32_t id, std::string* out);
  std::string push(int32_t id);
  // Ends the stream: appends what is held back (an incomplete character becomes U+FFFD).
  void finish(std::string* out);
  std::string finish();
  // Starts a new stream.
  void reset();

 private:
  struct State;
  std::shared_ptr<const tok::TokenizerImpl> impl_;
  std::unique_ptr<State> state_;
  bool skip_special_;
};

}  // namespace strata
