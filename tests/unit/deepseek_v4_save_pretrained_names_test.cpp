// transformers' save_pretrained names for DeepSeek-V4, made here from the published-name fixture
// (tests/fixtures/deepseek_v4_tiny) by renaming its tensors: the logits are bit-equal to the
// published load, and a tensor missing under both names is an error naming both.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/io/config.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"
#include "deepseek_v4_test_util.h"

using namespace strata;
using dsv4_testing::TempDir;

namespace {

const std::string kFixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/deepseek_v4_tiny";

// A published name as transformers 5.17's save_pretrained writes it ("" for mtp.*, which HF's
// model does not hold). Written out here, independently of the loader's table.
std::string save_pretrained_name(const std::string& pub) {
  if (pub.starts_with("mtp.")) return "";
  if (pub == "embed.weight") return "model.embed_tokens.weight";
  if (pub == "norm.weight") return "model.norm.weight";
  if (pub == "head.weight") return "head.weight";
  if (pub.starts_with("hc_head_")) return "model.hc_head.hc_" + pub.substr(8);
  EXPECT_TRUE(pub.starts_with("layers.")) << pub;
  const std::string kv = ".attn.kv_norm.weight";
  if (pub.ends_with(kv)) return "model." + pub.substr(0, pub.size() - kv.size()) + ".attn.norm.weight";
  return "model." + pub;
}

// The fixture's tensors renamed to save_pretrained's names (less `drop`), with its config.json.
void write_save_pretrained_copy(const TempDir& dir, const std::string& drop = "") {
  std::filesystem::copy_file(kFixture + "/config.json", dir.file("config.json"));
  const Checkpoint src = Checkpoint::open(kFixture);
  std::vector<std::pair<std::string, Tensor>> renamed;
  for (const std::string& name : src.names()) {
    const std::string to = save_pretrained_name(name);
    if (!to.empty() && to != drop) renamed.emplace_back(to, src.get(name));
  }
  ASSERT_GT(renamed.size(), 100u);
  write_safetensors(dir.file("model.safetensors"), renamed);
}

std::vector<int32_t> fixture_prompt(size_t n) {
  auto ids = read_json_file(kFixture + "/reference.json").at("prompt_ids").get<std::vector<int32_t>>();
  ids.resize(std::min(ids.size(), n));
  return ids;
}

Tensor logits(Model& model, const std::vector<int32_t>& ids) {
  SingleSequence seq(model, int64_t(ids.size()));
  return seq.append(ids, true);
}

}  // namespace

TEST(DeepseekV4SavePretrainedNames, LogitsAreBitEqualToThePublishedLoad) {
  TempDir dir;
  write_save_pretrained_copy(dir);
  const Checkpoint saved = Checkpoint::open(dir.dir());
  ASSERT_TRUE(saved.has("model.layers.0.attn.norm.weight"));
  ASSERT_FALSE(saved.has("embed.weight"));
  const std::vector<int32_t> ids = fixture_prompt(200);
  auto published = load_model(kFixture);
  auto renamed = load_model(dir.dir());
  const Tensor a = logits(*published, ids), b = logits(*renamed, ids);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

TEST(DeepseekV4SavePretrainedNames, ATensorMissingUnderBothNamesIsAnErrorNamingBoth) {
  for (const auto& [pub, saved] : std::vector<std::pair<std::string, std::string>>{
           {"layers.1.attn.kv_norm.weight", "model.layers.1.attn.norm.weight"},
           {"hc_head_fn", "model.hc_head.hc_fn"},
           {"layers.3.ffn.experts.2.w3.weight", "model.layers.3.ffn.experts.2.w3.weight"}}) {
    TempDir dir;
    write_save_pretrained_copy(dir, saved);
    try {
      load_model(dir.dir());
      ADD_FAILURE() << "no error without " << saved;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("missing tensor '" + pub + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + saved + "'"), std::string::npos) << msg;
    }
  }
}
