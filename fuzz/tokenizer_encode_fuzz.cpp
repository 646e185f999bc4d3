// Fuzzes encoding: arbitrary bytes (invalid UTF-8 included) through a small built-in byte-level
// tokenizer with NFC, a Qwen-style regex, Digits, added tokens with every flag and a template
// post-processor. Invalid UTF-8 must give strata::Error; valid text must round-trip through
// decode (up to NFC) and the streaming decoder must agree with decode. Seeds:
// fuzz/seeds/tokenizer/encode/.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer.h"
#include "strata/tokenizer/unicode.h"

namespace {

std::string tokenizer_json() {
  // The byte alphabet, plus merges that build a few words.
  std::string vocab, merges;
  int id = 0;
  std::vector<std::string> alphabet;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    strata::tok::utf8_append(&ch, strata::tok::byte_to_char()[size_t(b)]);
    alphabet.push_back(ch);
  }
  auto esc = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o;
  };
  for (const auto& ch : alphabet)
    vocab += (id ? "," : "") + ("\"" + esc(ch) + "\":" + std::to_string(id++));
  const char* words[] = {"the", "hello", "world", "\xC4\xA0the", "ing", "\xC4\xA0\xC4\xA0"};
  for (const char* w : words) {
    std::string cur;
    std::string word = w;
    for (size_t i = 0; i < word.size();) {
      size_t len = size_t(strata::tok::utf8_len(uint8_t(word[i])));
      std::string ch = word.substr(i, len);
      i += len;
      if (cur.empty()) {
        cur = ch;
        continue;
      }
      std::string next = cur + ch;
      if (vocab.find("\"" + esc(next) + "\":") == std::string::npos) {
        vocab += ",\"" + esc(next) + "\":" + std::to_string(id++);
        merges += (merges.empty() ? "" : ",") + ("[\"" + esc(cur) + "\",\"" + esc(ch) + "\"]");
      }
      cur = next;
    }
  }
  std::string n = std::to_string(id);
  return R"({"version":"1.0","added_tokens":[
    {"id":)" +
         n +
         R"(,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
    {"id":)" +
         std::to_string(id + 1) +
         R"(,"content":"[M]","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true},
    {"id":)" +
         std::to_string(id + 2) +
         R"(,"content":"sw","single_word":true,"lstrip":false,"rstrip":false,"normalized":true,"special":false}],
   "normalizer":{"type":"NFC"},
   "pre_tokenizer":{"type":"Sequence","pretokenizers":[
     {"type":"Digits","individual_digits":true},
     {"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},"behavior":"Isolated","invert":false},
     {"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":false}]},
   "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],
     "special_tokens":{"<s>":{"id":"<s>","ids":[)" +
         n + R"(],"tokens":["<s>"]}}},
   "decoder":{"type":"ByteLevel"},
   "model":{"type":"BPE","ignore_merges":true,"vocab":{)" +
         vocab + R"(},"merges":[)" + merges + "]}}";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const strata::Tokenizer tok = strata::Tokenizer::from_json(tokenizer_json(), "builtin");
  std::string_view text(reinterpret_cast<const char*>(data), size);
  bool valid = strata::tok::utf8_valid_prefix(text) == text.size();
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, true);
  } catch (const strata::Error&) {
    if (valid) std::abort();  // valid text must encode
    return 0;
  }
  if (!valid) std::abort();  // invalid UTF-8 must be rejected
  std::string dec = tok.decode(ids);
  strata::IncrementalDecoder inc(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += inc.push(id);
  streamed += inc.finish();
  if (streamed != dec) std::abort();
  // Pure ASCII is unchanged by NFC: decode(encode(x)) is "<s>" + x (with a prefix space where
  // ByteLevel added one, and [M] swallowing spaces around it).
  bool ascii = true;
  for (char c : text) ascii = ascii && uint8_t(c) < 0x80;
  if (ascii && text.find("[M]") == std::string_view::npos && dec.rfind("<s>", 0) != 0) std::abort();
  return 0;
}
