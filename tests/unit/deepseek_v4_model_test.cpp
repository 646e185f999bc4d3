// The whole DeepSeek-V4 forward on a randomly initialised tiny checkpoint written here (no HF):
// full, stepwise and chunked prefill agree for every page size, two sequences batched together
// (one decoding, one mid-prefill, interleaved pages) match their solo runs, and the same weights
// under HF's names, or quantised (FP8 block / MXFP4) against their dequantised float values,
// give the same logits. Bad checkpoints fail with errors that name the tensor or field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/safetensors.h"
#include "strata/models/deepseek_v4_config.h"
#include "strata/models/model.h"
#include "deepseek_v4_test_util.h"

using namespace strata;
using namespace strata::dsv4_testing;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  return m;
}

// Logits of every position, fed in chunks of `chunk` tokens through pages of `block_size`.
Tensor run(Model& model, const std::vector<int32_t>& ids, size_t chunk, int block_size) {
  SingleSequence seq(model, int64_t(ids.size()), block_size);
  const int64_t vocab = model.info().vocab_size;
  Tensor out = Tensor::empty({int64_t(ids.size()), vocab}, DType::kF32);
  for (size_t start = 0; start < ids.size(); start += chunk) {
    std::vector<int32_t> part(ids.begin() + long(start), ids.begin() + long(std::min(ids.size(), start + chunk)));
    Tensor l = seq.append(part, true);
    std::memcpy(out.data<float>() + int64_t(start) * vocab, l.raw(), l.nbytes());
  }
  return out;
}

}  // namespace

TEST(DeepseekV4Model, InfoAndCacheSpec) {
  TempDir dir;
  write_checkpoint(dir, published_weights(1));
  auto model = load_model(dir.dir());
  const ModelInfo& info = model->info();
  EXPECT_EQ(info.model_type, "deepseek_v4");
  EXPECT_EQ(info.vocab_size, kVocab);
  ASSERT_EQ(info.cache.layers.size(), 4u);
  EXPECT_EQ(info.cache.layers[0].paged.size(), 1u);  // window only
  EXPECT_TRUE(info.cache.layers[0].slots.empty());
  ASSERT_EQ(info.cache.layers[1].paged.size(), 3u);  // window, compressed, indexer keys
  EXPECT_EQ(info.cache.layers[1].paged[1].tokens_per_entry, 4);
  EXPECT_EQ(info.cache.layers[1].paged[2].per_entry, Shape({kIndexDim}));
  EXPECT_EQ(info.cache.layers[1].slots.size(), 4u);
  EXPECT_EQ(info.cache.layers[1].slots[0].shape, Shape({8, 2 * kHeadDim}));
  ASSERT_EQ(info.cache.layers[2].paged.size(), 2u);
  EXPECT_EQ(info.cache.layers[2].paged[1].tokens_per_entry, 128);
  EXPECT_EQ(info.cache.layers[2].slots[0].shape, Shape({128, kHeadDim}));
}

TEST(DeepseekV4Model, FullStepwiseAndChunkedAgreeForEveryPageSize) {
  TempDir dir;
  write_checkpoint(dir, published_weights(2));
  auto model = load_model(dir.dir());
  const std::vector<int32_t> ids = prompt(300, 7);  // two ratio-128 entries, 75 ratio-4 entries
  const Tensor full = run(*model, ids, ids.size(), 16);
  double spread = 0;
  for (int64_t i = 0; i < full.numel(); ++i) spread = std::max(spread, double(std::fabs(full.data<float>()[i])));
  EXPECT_GT(spread, 0.5) << "logits are degenerate";
  for (int block : {4, 16, 256}) {
    for (size_t chunk : {size_t(1), size_t(7), size_t(64), size_t(300)}) {
      const double d = max_diff(run(*model, ids, chunk, block), full);
      std::printf("  block %3d chunk %3zu: max|d| vs full = %.3g\n", block, chunk, d);
      EXPECT_LE(d, 1e-4) << "block " << block << " chunk " << chunk;
    }
  }
}

TEST(DeepseekV4Model, BatchedSequencesMatchTheirSoloRuns) {
  TempDir dir;
  write_checkpoint(dir, published_weights(3));
  auto model = load_model(dir.dir());
  const std::vector<int32_t> a = prompt(151, 11), b = prompt(37, 12);
  const Tensor solo_a = run(*model, a, a.size(), 16);
  const Tensor solo_b = run(*model, b, b.size(), 16);
  // Sequence A (slot 1, even pages) prefills 150 tokens alone, then decodes its 151st token in
  // the same step as sequence B (slot 0, odd pages) prefills 37 tokens.
  const int block = 16;
  Caches caches = Caches::allocate(model->info().cache, 40, block, 2, Device::kCpu);
  SeqInBatch sa, sb;
  for (int p = 0; p < 20; ++p) {
    sa.block_table.push_back(2 * p);
    sb.block_table.push_back(2 * p + 1);
  }
  sa.state_slot = 1;
  sb.state_slot = 0;
  ForwardBatch first;
  first.token_ids.assign(a.begin(), a.begin() + 150);
  for (int32_t i = 0; i < 150; ++i) first.positions.push_back(i);
  sa.q_len = 150;
  first.seqs = {sa};
  first.logit_rows = {149};
  Tensor logits;
  model->forward(first, caches, logits);
  EXPECT_LE(max_diff(logits, solo_a.rows(149, 150)), 1e-4);
  ForwardBatch step;
  step.token_ids = {a[150]};
  step.positions = {150};
  sa.q_start = 0;
  sa.q_len = 1;
  sa.ctx_len = 150;
  sb.q_start = 1;
  sb.q_len = 37;
  sb.ctx_len = 0;
  for (int32_t i = 0; i < 37; ++i) {
    step.token_ids.push_back(b[size_t(i)]);
    step.positions.push_back(i);
  }
  step.seqs = {sa, sb};
  for (int32_t r = 0; r < 38; ++r) step.logit_rows.push_back(r);
  model->forward(step, caches, logits);
  EXPECT_LE(max_diff(logits.rows(0, 1), solo_a.rows(150, 151)), 1e-4);
  EXPECT_LE(max_diff(logits.rows(1, 38), solo_b), 1e-4);
}

namespace {

// Published layer suffix -> HF module suffix (restated from transformers' conversion mapping).
const std::map<std::string, std::string> kHfSuffix = {
    {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"hc_attn_fn", "attn_hc.fn"}, {"hc_attn_base", "attn_hc.base"}, {"hc_attn_scale", "attn_hc.scale"},
    {"hc_ffn_fn", "ffn_hc.fn"}, {"hc_ffn_base", "ffn_hc.base"}, {"hc_ffn_scale", "ffn_hc.scale"},
    {"attn.attn_sink", "self_attn.sinks"}, {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
    {"attn.q_norm.weight", "self_attn.q_a_norm.weight"}, {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
    {"attn.wkv.weight", "self_attn.kv_proj.weight"}, {"attn.kv_norm.weight", "self_attn.kv_norm.weight"},
    {"attn.wo_a.weight", "self_attn.o_a_proj.weight"}, {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
    {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
    {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
    {"attn.compressor.ape", "self_attn.compressor.position_bias"},
    {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
    {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
    {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
    {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
    {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
    {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
    {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
    {"ffn.gate.weight", "mlp.gate.weight"}, {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
    {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
    {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
};

TensorMap to_hf_names(const TensorMap& pub) {
  TensorMap hf;
  const std::map<std::string, std::string> top = {
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
      {"norm.weight", "model.norm.weight"}, {"hc_head_fn", "model.hc_head.hc_fn"},
      {"hc_head_base", "model.hc_head.hc_base"}, {"hc_head_scale", "model.hc_head.hc_scale"}};
  for (const auto& [name, t] : pub) {
    if (top.count(name)) {
      hf[top.at(name)] = t;
      continue;
    }
    const size_t dot = name.find('.', 7);  // "layers.N."
    const std::string layer = name.substr(7, dot - 7), suffix = name.substr(dot + 1);
    if (suffix.rfind("ffn.experts.", 0) == 0) continue;  // fused below
    hf["model.layers." + layer + "." + kHfSuffix.at(suffix)] = t;
  }
  for (size_t i = 0; i < kRatios.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".ffn.experts.";
    Tensor gu = Tensor::empty({kExperts, 2 * kInter, kHidden}, DType::kF32);
    Tensor down = Tensor::empty({kExperts, kHidden, kInter}, DType::kF32);
    for (int64_t e = 0; e < kExperts; ++e) {
      const std::string q = p + std::to_string(e) + ".";
      float* g = gu.data<float>() + e * 2 * kInter * kHidden;
      std::memcpy(g, pub.at(q + "w1.weight").raw(), size_t(kInter * kHidden) * 4);
      std::memcpy(g + kInter * kHidden, pub.at(q + "w3.weight").raw(), size_t(kInter * kHidden) * 4);
      std::memcpy(down.data<float>() + e * kHidden * kInter, pub.at(q + "w2.weight").raw(), size_t(kHidden * kInter) * 4);
    }
    hf["model.layers." + std::to_string(i) + ".mlp.experts.gate_up_proj"] = gu;
    hf["model.layers." + std::to_string(i) + ".mlp.experts.down_proj"] = down;
  }
  return hf;
}

float e4m3_value(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return (b & 0x80) ? -mag : mag;
}

// Replaces a float matrix by random FP8 codes with one scale per 128 x 128 block (ue8m0 or F32)
// and puts the exact dequantised values in `reference`.
void quantise_fp8(TensorMap& q, TensorMap& reference, const std::string& name, bool float_scale, Rng& rng) {
  const Tensor& w = reference.at(name);
  const int64_t n = w.dim(0), k = w.dim(1), bn = (n + 127) / 128, bk = (k + 127) / 128;
  Tensor codes = Tensor::empty({n, k}, DType::kF8E4M3);
  Tensor scales = float_scale ? Tensor::empty({bn, bk}, DType::kF32) : Tensor::empty({bn, bk}, DType::kUE8M0);
  for (int64_t i = 0; i < bn * bk; ++i) {
    if (float_scale) {
      scales.data<float>()[i] = 0.003f * float(1 + i);
    } else {
      scales.data<uint8_t>()[i] = uint8_t(119 + i);  // 2^-8 ...
    }
  }
  Tensor deq = Tensor::empty({n, k}, DType::kF32);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      // Codes of magnitude up to ~16 (exponent <= 10), never NaN.
      uint8_t code = uint8_t((int((rng.uniform() + 1.f) * 40.f) + 24) & 0x7f);
      if (rng.uniform() < 0) code |= 0x80;
      codes.data<uint8_t>()[r * k + c] = code;
      const int64_t s = (r / 128) * bk + c / 128;
      const float scale = float_scale ? scales.data<float>()[s] : std::ldexp(1.f, int(scales.data<uint8_t>()[s]) - 127);
      deq.data<float>()[r * k + c] = e4m3_value(code) * scale;
    }
  }
  const std::string base = name.substr(0, name.size() - 7);
  q[name] = codes;
  q[base + ".scale"] = scales;
  reference[name] = deq;
}

void quantise_mxfp4(TensorMap& q, TensorMap& reference, const std::string& name, Rng& rng) {
  static const float kGrid[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const Tensor& w = reference.at(name);
  const int64_t n = w.dim(0), k = w.dim(1);
  Tensor packed = Tensor::empty({n, k / 2}, DType::kI8);
  Tensor scales = Tensor::empty({n, k / 32}, DType::kUE8M0);
  Tensor deq = Tensor::empty({n, k}, DType::kF32);
  for (int64_t i = 0; i < n * k / 32; ++i) scales.data<uint8_t>()[i] = uint8_t(122 + (i % 5));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; c += 2) {
      uint8_t nib[2];
      for (int j = 0; j < 2; ++j) {
        nib[j] = uint8_t(int((rng.uniform() + 1.f) * 8.f) & 15);
        const float v = kGrid[nib[j] & 7] * ((nib[j] & 8) ? -1.f : 1.f);
        deq.data<float>()[r * k + c + j] = v * std::ldexp(1.f, int(scales.data<uint8_t>()[r * (k / 32) + (c + j) / 32]) - 127);
      }
      packed.data<uint8_t>()[r * (k / 2) + c / 2] = uint8_t(nib[0] | (nib[1] << 4));
    }
  }
  const std::string base = name.substr(0, name.size() - 7);
  q[name] = packed;
  q[base + ".scale"] = scales;
  reference[name] = deq;
}

}  // namespace

TEST(DeepseekV4Model, HfNamesGiveTheSameLogits) {
  const TensorMap pub = published_weights(4);
  TempDir a, b;
  write_checkpoint(a, pub);
  write_checkpoint(b, to_hf_names(pub));
  const std::vector<int32_t> ids = prompt(140, 5);
  auto ma = load_model(a.dir());
  auto mb = load_model(b.dir());
  EXPECT_EQ(max_diff(run(*ma, ids, ids.size(), 16), run(*mb, ids, ids.size(), 16)), 0.0);
}

TEST(DeepseekV4Model, QuantisedWeightsMatchTheirDequantisedValues) {
  TensorMap reference = published_weights(5);
  TensorMap quantised = reference;
  Rng rng(99);
  for (size_t i = 0; i < kRatios.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    quantise_fp8(quantised, reference, p + "attn.wq_a.weight", false, rng);
    quantise_fp8(quantised, reference, p + "attn.wq_b.weight", false, rng);
    quantise_fp8(quantised, reference, p + "attn.wo_b.weight", true, rng);
    quantise_fp8(quantised, reference, p + "ffn.shared_experts.w2.weight", true, rng);
    for (int64_t e = 0; e < kExperts; ++e) {
      for (const char* proj : {"w1", "w2", "w3"}) {
        quantise_mxfp4(quantised, reference, p + "ffn.experts." + std::to_string(e) + "." + proj + ".weight", rng);
      }
    }
  }
  TempDir a, b;
  write_checkpoint(a, quantised);
  write_checkpoint(b, reference);
  const std::vector<int32_t> ids = prompt(60, 6);
  auto ma = load_model(a.dir());
  auto mb = load_model(b.dir());
  EXPECT_EQ(max_diff(run(*ma, ids, ids.size(), 16), run(*mb, ids, ids.size(), 16)), 0.0);
}

namespace {

void expect_load_error(const TensorMap& w, const std::string& config, const std::vector<std::string>& parts) {
  TempDir dir;
  write_checkpoint(dir, w, config);
  try {
    load_model(dir.dir());
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " | " << msg;
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST(DeepseekV4Model, BadCheckpointsNameTheTensorOrField) {
  TensorMap w = published_weights(6);
  TensorMap missing = w;
  missing.erase("layers.1.attn.indexer.wq_b.weight");
  expect_load_error(missing, config_json(), {"layers.1.attn.indexer.wq_b.weight"});
  TensorMap extra = w;
  extra["layers.0.attn.surprise"] = Tensor::zeros({1}, DType::kF32);
  extra["mtp.0.e_proj.weight"] = Tensor::zeros({1}, DType::kF32);  // MTP tensors are ignored
  expect_load_error(extra, config_json(), {"unexpected tensor 'layers.0.attn.surprise'"});
  TensorMap wrong = w;
  wrong["layers.2.attn.compressor.ape"] = Tensor::zeros({4, kHeadDim}, DType::kF32);
  expect_load_error(wrong, config_json(), {"layers.2.attn.compressor.ape", "[128, 32]"});
  expect_load_error(w, replace(config_json(), "[0, 4, 128, 4, 0]", "[0, 4, 16, 4, 0]"),
                    {"config.json", "compress_ratios", "16"});
  expect_load_error(w, replace(config_json(), "\"yarn\"", "\"longrope\""), {"config.json", "longrope"});
}

// HF's nested rope_parameters {main, compress} spells the same ropes as the published flat
// layout (rope_theta, compress_rope_theta, rope_scaling) when it says the same thing, and its
// sub-dicts are really read.
TEST(DeepseekV4Config, NestedRopeParametersMatchTheFlatLayout) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/deepseek_v4_tiny";
  nlohmann::json flat;
  std::ifstream(dir + "/config.json") >> flat;
  ASSERT_TRUE(flat.contains("rope_scaling"));
  const double partial = double(flat["qk_rope_head_dim"].get<int>()) / flat["head_dim"].get<int>();
  nlohmann::json nested = flat;
  nested.erase("rope_scaling");
  nlohmann::json compress = flat["rope_scaling"];
  compress.erase("type");
  compress["rope_type"] = "yarn";
  compress["rope_theta"] = flat["compress_rope_theta"];
  compress["partial_rotary_factor"] = partial;
  compress["attention_factor"] = 1.0;
  nested["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", flat["rope_theta"]}, {"partial_rotary_factor", partial}}},
      {"compress", compress}};
  const DeepseekV4Config a = parse_deepseek_v4_config(flat, "flat");
  const DeepseekV4Config b = parse_deepseek_v4_config(nested, "nested");
  for (const auto& [x, y] : {std::pair{&a.rope_main, &b.rope_main}, std::pair{&a.rope_compress, &b.rope_compress}}) {
    EXPECT_EQ(x->rotary_dim, y->rotary_dim);
    EXPECT_EQ(x->inv_freq, y->inv_freq);
    EXPECT_EQ(x->attention_scaling, y->attention_scaling);
  }
  EXPECT_NE(a.rope_main.inv_freq, a.rope_compress.inv_freq);
  // YaRN on the main rope too: its frequencies change, the compress rope's do not.
  nested["rope_parameters"]["main"] = compress;
  nested["rope_parameters"]["main"]["rope_theta"] = flat["rope_theta"];
  const DeepseekV4Config c = parse_deepseek_v4_config(nested, "nested-yarn");
  EXPECT_NE(c.rope_main.inv_freq, a.rope_main.inv_freq);
  EXPECT_EQ(c.rope_compress.inv_freq, a.rope_compress.inv_freq);
}
