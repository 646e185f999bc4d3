// The quantised-checkpoint tests' fixture (fp8_load_test.cpp, nvfp4_load_test.cpp): qwen3_5_tiny
// with its projections quantised by a format's recipe in `quant/`, and in `plain/` the same model
// with those weights dequantised to F32, the model the quantised file means.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/quantise_checkpoint.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"

namespace strata {

inline Tensor as_f32(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    out.data<float>()[i] = t.dtype() == DType::kF32 ? t.data<float>()[i]
                                                    : bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
  }
  return out;
}

// The projections the published checkpoints quantise (GDN's small in_proj_a / in_proj_b stay bf16;
// io/quantise_checkpoint.h).
inline bool quantised_name(const std::string& name) { return quantised_by_recipe(name); }

class QuantisedCheckpoint : public ::testing::Test {
 protected:
  using Named = std::vector<std::pair<std::string, Tensor>>;
  // A weight's tensors in the quantised file, and its dequantised F32 value.
  struct Quantised {
    Named tensors;
    Tensor dequantised;
  };
  // Fills quant_ and plain_ from qwen3_5_tiny: every 2-D tensor of a quantised_name that
  // `eligible` takes goes through `quantise`, the rest is copied; writes plain/.
  void make(const std::string& tag, const std::function<bool(const TensorInfo&)>& eligible,
            const std::function<Quantised(const std::string&, const Tensor&)>& quantise) {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("strata_" + tag + "_" + std::to_string(rd()));
    std::filesystem::create_directories(dir_ / "quant");
    std::filesystem::create_directories(dir_ / "plain");
    const std::string fixture = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen3_5_tiny";
    std::ifstream in(fixture + "/config.json");
    config_ = nlohmann::json::parse(in);
    std::filesystem::copy_file(fixture + "/config.json", dir_ / "plain" / "config.json");
    auto file = SafetensorsFile::open(fixture + "/model.safetensors");
    for (const TensorInfo& t : file->header().tensors) {
      const Tensor stored = file->get(t.name);
      if (!quantised_name(t.name) || t.shape.size() != 2 || !eligible(t)) {
        quant_.emplace_back(t.name, stored);
        plain_.emplace_back(t.name, stored);
        continue;
      }
      Quantised q = quantise(t.name, as_f32(stored));
      quant_.insert(quant_.end(), q.tensors.begin(), q.tensors.end());
      plain_.emplace_back(t.name, q.dequantised);
      ++quantised_;
    }
    keep_ = file;
    write_safetensors((dir_ / "plain" / "model.safetensors").string(), plain_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // quant/ with config_ and these tensors.
  void write(const Named& tensors) {
    std::ofstream(dir_ / "quant" / "config.json") << config_.dump(2);
    write_safetensors((dir_ / "quant" / "model.safetensors").string(), tensors);
  }
  std::string quant_dir() const { return (dir_ / "quant").string(); }
  std::string load_error() {
    try {
      load_model(quant_dir());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  // quant/ with config_ and quant_ fails to load with an error holding every one of `parts`.
  void expect_load_error(const std::vector<std::string>& parts) {
    write(quant_);
    const std::string e = load_error();
    EXPECT_FALSE(e.empty()) << "quant/ loaded";
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "no '" << p << "' in: " << e;
  }
  std::pair<std::string, Tensor>& find(const std::string& suffix) {
    for (auto& t : quant_) {
      if (t.first.ends_with(suffix)) return t;
    }
    throw std::runtime_error("no tensor ending in " + suffix);
  }
  // quant/ as written loads to the model of plain/: bit-equal logits.
  void expect_same_logits() {
    auto quant = load_model(quant_dir());
    auto plain = load_model((dir_ / "plain").string());
    const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7};
    const Tensor a = sequence_logits(*quant, ids, "full"), b = sequence_logits(*plain, ids, "full");
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  }

  std::filesystem::path dir_;
  nlohmann::json config_;
  Named quant_, plain_;
  std::shared_ptr<SafetensorsFile> keep_;
  int quantised_ = 0;
};

}  // namespace strata
