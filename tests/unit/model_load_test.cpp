// Broken checkpoints fail to load with errors that name the file and the tensor or field.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/io/config.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

const std::string kFixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_tiny";

// A writable copy of the qwen3_5_tiny fixture whose tensors and config can be edited.
class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("strata_broken_" + std::to_string(rd()));
    fs::create_directories(dir_);
    fs::copy_file(kFixture + "/config.json", dir_ / "config.json");
    auto file = SafetensorsFile::open(kFixture + "/model.safetensors");
    for (const TensorInfo& t : file->header().tensors) tensors_.emplace_back(t.name, file->get(t.name));
    keep_ = file;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::vector<std::pair<std::string, Tensor>>& tensors) {
    write_safetensors((dir_ / "model.safetensors").string(), tensors);
  }
  std::string load_error() {
    try {
      load_model(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  std::shared_ptr<SafetensorsFile> keep_;
};

TEST_F(BrokenCheckpoint, IntactCopyLoads) {
  write(tensors_);
  EXPECT_EQ(load_error(), "");
}

TEST_F(BrokenCheckpoint, MissingTensorIsNamed) {
  auto t = tensors_;
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](auto& p) { return p.first == "model.layers.1.self_attn.k_norm.weight"; }),
          t.end());
  write(t);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.1.self_attn.k_norm.weight"), std::string::npos) << err;
  EXPECT_NE(err.find(dir_.string()), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, WrongShapeIsNamedWithBothShapes) {
  auto t = tensors_;
  for (auto& p : t) {
    if (p.first == "model.layers.0.linear_attn.in_proj_z.weight") p.second = p.second.reshape({-1, 32});
  }
  write(t);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.0.linear_attn.in_proj_z.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("expected shape [48, 64]"), std::string::npos) << err;
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, IntegerWeightIsNamedWithItsDtype) {
  auto t = tensors_;
  for (auto& p : t) {
    if (p.first == "model.layers.0.mlp.down_proj.weight") p.second = Tensor::zeros(p.second.shape(), DType::kI32);
  }
  write(t);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight': dtype I32 needs a quantised "
                     "loader"),
            std::string::npos)
      << err;
}

// A header of odd length leaves every tensor misaligned in the mapping: the loader reads them in
// place, and the model's logits are the aligned copy's, bit for bit.
TEST_F(BrokenCheckpoint, MisalignedTensorsLoadBitForBit) {
  write(tensors_);
  const fs::path path = dir_ / "model.safetensors";
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string header = bytes.substr(8, n) + " ", data = bytes.substr(8 + n);
  const uint64_t odd = header.size();
  ASSERT_EQ((8 + odd) % 2, 1u);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&odd), 8);
  out << header << data;
  out.close();
  auto model = load_model(dir_.string());
  auto plain = load_model(kFixture);
  const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7};
  const Tensor a = sequence_logits(*model, ids, "full"), b = sequence_logits(*plain, ids, "full");
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

TEST_F(BrokenCheckpoint, UnexpectedTensorIsNamed) {
  auto t = tensors_;
  t.emplace_back("model.layers.0.mystery.weight", Tensor::zeros({2}, DType::kBF16));
  write(t);
  EXPECT_NE(load_error().find("model.layers.0.mystery.weight"), std::string::npos);
}

TEST_F(BrokenCheckpoint, MalformedConfigIsNamed) {
  write(tensors_);
  std::ofstream(dir_ / "config.json") << "{\"model_type\": \"qwen3_5_text\", \"hidden_size\": ";
  EXPECT_NE(load_error().find("config.json"), std::string::npos);
}

TEST_F(BrokenCheckpoint, WrongFieldTypeIsNamed) {
  write(tensors_);
  nlohmann::json cfg = read_json_file((dir_ / "config.json").string());
  cfg["num_hidden_layers"] = "four";
  std::ofstream(dir_ / "config.json") << cfg.dump();
  const std::string err = load_error();
  EXPECT_NE(err.find("num_hidden_layers"), std::string::npos) << err;
}

TEST_F(BrokenCheckpoint, LayerTypesOfWrongLengthAreRejected) {
  write(tensors_);
  nlohmann::json cfg = read_json_file((dir_ / "config.json").string());
  cfg["layer_types"] = {"linear_attention"};
  std::ofstream(dir_ / "config.json") << cfg.dump();
  EXPECT_NE(load_error().find("layer_types"), std::string::npos);
}

TEST_F(BrokenCheckpoint, UnknownModelTypeIsNamed) {
  write(tensors_);
  nlohmann::json cfg = read_json_file((dir_ / "config.json").string());
  cfg["model_type"] = "llama_next";
  std::ofstream(dir_ / "config.json") << cfg.dump();
  EXPECT_NE(load_error().find("llama_next"), std::string::npos);
}

TEST(ModelInput, TokenIdOutOfRangeIsAnError) {
  auto model = load_model(kFixture);
  EXPECT_THROW(sequence_logits(*model, {1, 2, 100000}, "full"), Error);
  EXPECT_THROW(sequence_logits(*model, {1, 2}, "chunked:0"), Error);
  EXPECT_THROW(sequence_logits(*model, {1, 2}, "sideways"), Error);
}

TEST(ModelLoad, MultimodalWrapperSkipsVisionAndMtp) {
  Checkpoint ckpt = Checkpoint::open(std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_moe_tiny");
  EXPECT_TRUE(ckpt.has("mtp.fc.weight"));
  EXPECT_TRUE(ckpt.has("model.visual.merger.linear_fc1.weight"));
  auto model = load_model(ckpt.dir());
  EXPECT_EQ(model->info().model_type, "qwen3_5_moe_text");
}


// Qwen3_5ForConditionalGeneration (dense): the language model under model.language_model.*,
// the config under text_config, a vision tower and an MTP head beside it. Its logits are the
// CausalLM fixture's, bit for bit.
TEST_F(BrokenCheckpoint, DenseMultimodalWrapperLoadsItsLanguageModel) {
  std::vector<std::pair<std::string, Tensor>> wrapped;
  for (const auto& [name, t] : tensors_) {
    ASSERT_EQ(name.rfind("model.", 0), 0u) << name;
    wrapped.emplace_back("model.language_model." + name.substr(6), t);
  }
  Tensor extra = Tensor::empty({4, 4}, DType::kF32);
  for (int64_t i = 0; i < extra.numel(); ++i) extra.data<float>()[i] = float(i);
  wrapped.emplace_back("model.visual.blocks.0.attn.qkv.weight", extra);
  wrapped.emplace_back("mtp.fc.weight", extra);
  write(wrapped);
  nlohmann::json text = read_json_file(kFixture + "/config.json");
  text["model_type"] = "qwen3_5_text";
  nlohmann::json wrapper = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                            {"model_type", "qwen3_5"},
                            {"tie_word_embeddings", text.value("tie_word_embeddings", false)},
                            {"text_config", text},
                            {"vision_config", {{"depth", 1}}}};
  std::ofstream(dir_ / "config.json") << wrapper.dump(1);
  auto model = load_model(dir_.string());
  auto plain = load_model(kFixture);
  const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7};
  const Tensor a = sequence_logits(*model, ids, "full"), b = sequence_logits(*plain, ids, "full");
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]) << i;
}

}  // namespace
}  // namespace strata
