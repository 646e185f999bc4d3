// A randomly initialised tiny DeepSeek-V4 checkpoint written by the tests themselves (no HF):
// all three layer types (window only, ratio 4 + indexer, ratio 128), hash and learned routing,
// YaRN on the compress rope, experts scaled so that the SwiGLU clamp bites.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "strata/core/tensor.h"
#include "strata/io/safetensors.h"

namespace strata::dsv4_testing {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("strata-dsv4-") + (info ? info->name() : "x") + "-" +
             std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string dir() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Sizes of the tiny model: all three layer types, hash and learned routing, YaRN.
inline constexpr int64_t kVocab = 64, kHidden = 32, kHeads = 2, kHeadDim = 32, kQLora = 16;
inline constexpr int64_t kGroups = 2, kORank = 8, kExperts = 4, kTopK = 2, kInter = 32;
inline constexpr int64_t kIndexHeads = 4, kIndexDim = 16, kStreams = 2;
inline const std::vector<int> kRatios = {0, 4, 128, 4};

inline std::string config_json() {
  return R"({
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
  "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2,
  "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 16,
  "o_groups": 2, "o_lora_rank": 8, "n_routed_experts": 4, "n_shared_experts": 1,
  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "scoring_func": "sqrtsoftplus",
  "routed_scaling_factor": 1.5, "num_hash_layers": 1, "compress_ratios": [0, 4, 128, 4, 0],
  "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
  "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64,
                   "beta_fast": 32, "beta_slow": 1},
  "sliding_window": 8, "index_n_heads": 4, "index_head_dim": 16, "index_topk": 3,
  "hc_mult": 2, "hc_sinkhorn_iters": 5, "hc_eps": 1e-6, "swiglu_limit": 3.0,
  "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "bos_token_id": 0, "eos_token_id": 1,
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                          "weight_block_size": [128, 128]}
})";
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  float uniform() {  // in [-1, 1)
    s_ = s_ * 6364136223846793005ull + 1442695040888963407ull;
    return float((s_ >> 40) & 0xffffff) / float(1 << 23) - 1.f;
  }

 private:
  uint64_t s_;
};

using TensorMap = std::map<std::string, Tensor>;

inline Tensor random_tensor(Rng& rng, Shape shape, float scale, float offset = 0.f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = offset + scale * rng.uniform();
  return t;
}

// The tensors of one decoder block under prefix `p` (e.g. "layers.2.", "mtp.0."): compress
// ratio 0, 4 or 128, hash or learned routing.
inline void add_block(TensorMap& w, Rng& rng, const std::string& p, int ratio, bool hash) {
  const int64_t mix = (2 + kStreams) * kStreams;
  auto mat = [&](const std::string& n, int64_t rows, int64_t cols, float gain = 1.f) {
    w[n] = random_tensor(rng, {rows, cols}, gain * std::sqrt(3.f / float(cols)));
  };
  auto norm = [&](const std::string& n, int64_t d) { w[n] = random_tensor(rng, {d}, 0.3f, 1.f); };
  norm(p + "attn_norm.weight", kHidden);
  norm(p + "ffn_norm.weight", kHidden);
  for (const char* site : {"attn", "ffn"}) {
    mat(p + "hc_" + site + "_fn", mix, kStreams * kHidden);
    w[p + "hc_" + site + "_base"] = random_tensor(rng, {mix}, 0.5f);
    w[p + "hc_" + site + "_scale"] = random_tensor(rng, {3}, 0.3f, 1.f);
  }
  mat(p + "attn.wq_a.weight", kQLora, kHidden);
  norm(p + "attn.q_norm.weight", kQLora);
  mat(p + "attn.wq_b.weight", kHeads * kHeadDim, kQLora);
  mat(p + "attn.wkv.weight", kHeadDim, kHidden);
  norm(p + "attn.kv_norm.weight", kHeadDim);
  mat(p + "attn.wo_a.weight", kGroups * kORank, kHeads * kHeadDim / kGroups);
  mat(p + "attn.wo_b.weight", kHidden, kGroups * kORank);
  w[p + "attn.attn_sink"] = random_tensor(rng, {kHeads}, 1.f);
  if (ratio != 0) {
    const int64_t width = ratio == 4 ? 2 * kHeadDim : kHeadDim;
    mat(p + "attn.compressor.wkv.weight", width, kHidden);
    mat(p + "attn.compressor.wgate.weight", width, kHidden);
    w[p + "attn.compressor.ape"] = random_tensor(rng, {ratio, width}, 0.5f);
    norm(p + "attn.compressor.norm.weight", kHeadDim);
  }
  if (ratio == 4) {
    mat(p + "attn.indexer.compressor.wkv.weight", 2 * kIndexDim, kHidden);
    mat(p + "attn.indexer.compressor.wgate.weight", 2 * kIndexDim, kHidden);
    w[p + "attn.indexer.compressor.ape"] = random_tensor(rng, {4, 2 * kIndexDim}, 0.5f);
    norm(p + "attn.indexer.compressor.norm.weight", kIndexDim);
    mat(p + "attn.indexer.wq_b.weight", kIndexHeads * kIndexDim, kQLora);
    mat(p + "attn.indexer.weights_proj.weight", kIndexHeads, kHidden);
  }
  mat(p + "ffn.gate.weight", kExperts, kHidden, 2.f);
  if (hash) {
    Tensor t = Tensor::empty({kVocab, kTopK}, DType::kI64);
    for (int64_t v = 0; v < kVocab; ++v) {
      t.data<int64_t>()[v * 2] = v % kExperts;
      t.data<int64_t>()[v * 2 + 1] = (v / kExperts + 1 + v % kExperts) % kExperts;
    }
    w[p + "ffn.gate.tid2eid"] = t;
  } else {
    w[p + "ffn.gate.bias"] = random_tensor(rng, {kExperts}, 0.3f);
  }
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
    mat(q + "w1.weight", kInter, kHidden, 3.f);  // large enough for the clamp to bite
    mat(q + "w3.weight", kInter, kHidden, 3.f);
    mat(q + "w2.weight", kHidden, kInter);
  }
  mat(p + "ffn.shared_experts.w1.weight", kInter, kHidden, 3.f);
  mat(p + "ffn.shared_experts.w3.weight", kInter, kHidden, 3.f);
  mat(p + "ffn.shared_experts.w2.weight", kHidden, kInter);
}

// Every tensor of the tiny model under the published names, float32.
inline TensorMap published_weights(uint64_t seed) {
  Rng rng(seed);
  TensorMap w;
  auto mat = [&](const std::string& n, int64_t rows, int64_t cols, float gain = 1.f) {
    w[n] = random_tensor(rng, {rows, cols}, gain * std::sqrt(3.f / float(cols)));
  };
  auto norm = [&](const std::string& n, int64_t d) { w[n] = random_tensor(rng, {d}, 0.3f, 1.f); };
  w["embed.weight"] = random_tensor(rng, {kVocab, kHidden}, 1.5f);
  mat("head.weight", kVocab, kHidden, 3.f);
  norm("norm.weight", kHidden);
  mat("hc_head_fn", kStreams, kStreams * kHidden);
  w["hc_head_base"] = random_tensor(rng, {kStreams}, 0.5f);
  w["hc_head_scale"] = random_tensor(rng, {1}, 0.3f, 1.f);
  for (size_t i = 0; i < kRatios.size(); ++i) {
    add_block(w, rng, "layers." + std::to_string(i) + ".", kRatios[i], i == 0);  // num_hash_layers = 1
  }
  return w;
}

// A multi-token-prediction block under the published names (mtp.0.*): e_proj, h_proj, their
// norms, its own final norm and hyper-connection head, and a window-only block with learned
// routing (the config's trailing compress_ratios entry is 0).
inline void add_mtp_weights(TensorMap& w, uint64_t seed) {
  Rng rng(seed);
  const std::string p = "mtp.0.";
  w[p + "e_proj.weight"] = random_tensor(rng, {kHidden, kHidden}, std::sqrt(3.f / float(kHidden)));
  w[p + "h_proj.weight"] = random_tensor(rng, {kHidden, kHidden}, std::sqrt(3.f / float(kHidden)));
  for (const char* n : {"enorm.weight", "hnorm.weight", "norm.weight"}) w[p + n] = random_tensor(rng, {kHidden}, 0.3f, 1.f);
  w[p + "hc_head_fn"] = random_tensor(rng, {kStreams, kStreams * kHidden}, std::sqrt(3.f / float(kStreams * kHidden)));
  w[p + "hc_head_base"] = random_tensor(rng, {kStreams}, 0.5f);
  w[p + "hc_head_scale"] = random_tensor(rng, {1}, 0.3f, 1.f);
  add_block(w, rng, p, 0, false);
}

// config_json() declaring one multi-token-prediction block.
inline std::string config_json_with_mtp() {
  std::string c = config_json();
  c.insert(c.find("\"vocab_size\""), "\"num_nextn_predict_layers\": 1, ");
  return c;
}

inline void write_checkpoint(const TempDir& dir, const TensorMap& w, const std::string& config = config_json()) {
  std::ofstream(dir.file("config.json")) << config;
  std::vector<std::pair<std::string, Tensor>> list(w.begin(), w.end());
  write_safetensors(dir.file("model.safetensors"), list);
}

inline std::vector<int32_t> prompt(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(int32_t((rng.uniform() + 1.f) * 0.5f * (kVocab - 3)) + 3);
  return ids;
}

}  // namespace strata::dsv4_testing
