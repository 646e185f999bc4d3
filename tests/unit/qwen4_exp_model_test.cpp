// The whole Qwen4-Exp model on a randomly initialised tiny checkpoint: the same logits however
// the sequence is split into steps and whatever else is in the batch, the multimodal wrapper
// layout, n-gram shard order, and clear errors on bad checkpoints.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "qwen4_exp_tiny_checkpoint.h"
#include "strata/core/error.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/models/model.h"
#include "strata/models/qwen4_exp_weights.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             (std::string("strata_q4_") + info->name() + "_" + std::to_string(::getpid())))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    m = std::max(m, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
  }
  return m;
}

// 40 tokens with EOS (id 2) at 9, 10 and 25: the indexer (ratio 4, 2 blocks) drops blocks from
// position 12 on, and the n-gram context restarts three times.
std::vector<int32_t> prompt() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(3 + (i * 37 + 11) % 61);
  ids[9] = ids[10] = ids[25] = 2;
  return ids;
}

TEST(Qwen4ExpModel, SameLogitsInEveryStepSplit) {
  TempDir tmp;
  auto model = load_model(write_tiny_qwen4_exp(tmp.sub("m"), {}));
  EXPECT_EQ(model->info().model_type, "qwen4_exp_text");
  const std::vector<int32_t> ids = prompt();
  const Tensor full = sequence_logits(*model, ids, "full");
  double spread = 0;
  for (int64_t i = 1; i < full.numel(); ++i) spread = std::max(spread, double(std::fabs(full.data<float>()[i])));
  EXPECT_GT(spread, 0.1);  // not a degenerate model
  for (const std::string mode : {"stepwise", "chunked:3", "chunked:7", "chunked:16"}) {
    const double d = max_diff(sequence_logits(*model, ids, mode), full);
    std::printf("  tiny qwen4_exp %-10s vs full: max|d| = %.3g\n", mode.c_str(), d);
    EXPECT_EQ(d, 0.0) << mode;
  }
}

TEST(Qwen4ExpModel, PageSizesAtAndBelowTheCompressRatio) {
  // Ratio 8 with 4-token pages: a block key spans two pages and lives in the first one.
  TempDir tmp;
  TinyQwen4Exp o;
  o.ratio = 8;
  o.budget = 16;
  auto model = load_model(write_tiny_qwen4_exp(tmp.sub("m"), o));
  const std::vector<int32_t> ids = prompt();
  const Tensor full = sequence_logits(*model, ids, "full");
  for (int block : {4, 8, 16}) {
    SingleSequence seq(*model, int64_t(ids.size()), block);
    Tensor got = Tensor::empty(full.shape(), DType::kF32);
    for (size_t i = 0; i < ids.size(); i += 5) {
      std::vector<int32_t> part(ids.begin() + i, ids.begin() + std::min(ids.size(), i + 5));
      Tensor l = seq.append(part, true);
      std::copy(l.data<float>(), l.data<float>() + l.numel(), got.data<float>() + i * full.dim(1));
    }
    EXPECT_EQ(max_diff(got, full), 0.0) << "block size " << block;
  }
}

// Two sequences in one batch, with their own slots and interleaved pages, give what each gives
// alone: over a prefill step and two decode steps.
TEST(Qwen4ExpModel, BatchedSequencesDoNotInteract) {
  TempDir tmp;
  auto model = load_model(write_tiny_qwen4_exp(tmp.sub("m"), {}));
  const std::vector<int32_t> a = prompt();
  std::vector<int32_t> b(a.rbegin(), a.rbegin() + 23);
  const int64_t vocab = model->info().vocab_size;
  const Tensor alone_a = sequence_logits(*model, a, "stepwise");
  const Tensor alone_b = sequence_logits(*model, b, "stepwise");
  const int block = 8;
  Caches caches = Caches::allocate(model->info().cache, 16, block, 3, Device::kCpu);
  std::vector<int32_t> table_a = {1, 3, 5, 7, 9, 11}, table_b = {2, 4, 6, 8};
  // Steps: (a 30, b 17), (a 1, b 1), (a 9, b 5).
  const std::vector<std::pair<int, int>> steps = {{30, 17}, {1, 1}, {9, 5}};
  int done_a = 0, done_b = 0;
  for (auto [na, nb] : steps) {
    ForwardBatch batch;
    SeqInBatch sa{0, na, done_a, table_a, 2}, sb{na, nb, done_b, table_b, 0};
    for (int i = 0; i < na; ++i) {
      batch.token_ids.push_back(a[done_a + i]);
      batch.positions.push_back(done_a + i);
    }
    for (int i = 0; i < nb; ++i) {
      batch.token_ids.push_back(b[done_b + i]);
      batch.positions.push_back(done_b + i);
    }
    batch.seqs = {sa, sb};
    for (int r = 0; r < na + nb; ++r) batch.logit_rows.push_back(r);
    Tensor logits;
    model->forward(batch, caches, logits);
    for (int r = 0; r < na + nb; ++r) {
      const bool is_a = r < na;
      const Tensor& ref = is_a ? alone_a : alone_b;
      const int64_t pos = is_a ? done_a + r : done_b + (r - na);
      for (int64_t v = 0; v < vocab; ++v) {
        ASSERT_EQ(logits.data<float>()[r * vocab + v], ref.data<float>()[pos * vocab + v])
            << (is_a ? "a" : "b") << " position " << pos;
      }
    }
    done_a += na;
    done_b += nb;
  }
}

TEST(Qwen4ExpModel, MultimodalWrapperAndFusedExpertsLoadTheSameModel) {
  TempDir tmp;
  TinyQwen4Exp text;
  TinyQwen4Exp vl = text;
  vl.multimodal = true;
  vl.layer_label = "qwen_sparse_attention";
  vl.files = 3;
  auto m1 = load_model(write_tiny_qwen4_exp(tmp.sub("text"), text));
  auto m2 = load_model(write_tiny_qwen4_exp(tmp.sub("vl"), vl));
  const std::vector<int32_t> ids = prompt();
  EXPECT_EQ(max_diff(sequence_logits(*m1, ids, "chunked:9"), sequence_logits(*m2, ids, "full")), 0.0);
  TinyQwen4Exp fused = text;
  fused.fused_experts = true;
  auto m3 = load_model(write_tiny_qwen4_exp(tmp.sub("fused"), fused));
  // Different random draws (fused tensors are drawn in another order): just a valid model.
  const Tensor l3 = sequence_logits(*m3, ids, "chunked:4");
  EXPECT_EQ(max_diff(l3, sequence_logits(*m3, ids, "stepwise")), 0.0);
}

TEST(Qwen4ExpModel, CacheSpecDeclaresEveryState) {
  TempDir tmp;
  auto model = load_model(write_tiny_qwen4_exp(tmp.sub("m"), {}));
  const CacheSpec& spec = model->info().cache;
  ASSERT_EQ(spec.layers.size(), 5u);
  // Layer 0: GDN with PLE.
  ASSERT_EQ(spec.layers[0].slots.size(), 4u);
  EXPECT_EQ(spec.layers[0].slots[2].name, "ple_conv");
  EXPECT_EQ(spec.layers[0].slots[2].shape, (Shape{9, 48}));  // (4 - 1) * 3 rows of hc * hidden
  EXPECT_EQ(spec.layers[0].slots[3].name, "ngram_context");
  EXPECT_EQ(spec.layers[0].slots[3].dtype, DType::kI32);
  EXPECT_TRUE(spec.layers[0].paged.empty());
  // Layer 1: GDN without PLE.
  EXPECT_EQ(spec.layers[1].slots.size(), 2u);
  // Layer 2: QSA.
  ASSERT_EQ(spec.layers[2].paged.size(), 3u);
  EXPECT_EQ(spec.layers[2].paged[2].tokens_per_entry, 4);
  EXPECT_EQ(spec.layers[2].paged[2].per_entry, (Shape{8}));
  EXPECT_EQ(spec.layers[2].slots[0].shape, (Shape{3, 8}));
}

// ---- the n-gram table's shards ----

TEST(Qwen4ExpModel, NgramShardsLoadInNumericOrder) {
  TempDir tmp;
  const std::string dir = tmp.sub("shards");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{}";
  const std::string prefix = "model.layers.1.ple.ple_embedding.ngram_embedding.";
  // 12 shards of 2 rows; row value = shard + row / 2. Files hold them in name order
  // (shard_0, shard_1, shard_10, shard_11, shard_2, ...), split over two files.
  std::vector<std::pair<std::string, Tensor>> f1, f2;
  for (int s = 0; s < 12; ++s) {
    Tensor t = Tensor::empty({2, 3}, DType::kBF16);
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c) t.data<uint16_t>()[r * 3 + c] = f32_to_bf16(float(s) + 0.5f * float(r));
    }
    (s % 2 ? f1 : f2).emplace_back(prefix + "shard_" + std::to_string(s) + ".weight", t);
  }
  write_safetensors(dir + "/a.safetensors", f1);
  write_safetensors(dir + "/b.safetensors", f2);
  Checkpoint ck = Checkpoint::open(dir);
  WeightLoader w(ck, "model.", Device::kCpu);
  std::vector<Tensor> table = load_ngram_table(w, prefix, 24, 3);
  ASSERT_EQ(table.size(), 12u);
  Tensor ids = Tensor::empty({24, 1}, DType::kI64);
  for (int i = 0; i < 24; ++i) ids.data<int64_t>()[i] = i;
  Tensor out = Tensor::empty({24, 3}, DType::kF32);
  ops::sharded_embedding(table, ids, out);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(out.data<float>()[i * 3], float(i / 2) + 0.5f * float(i % 2)) << i;
  EXPECT_TRUE(w.unused({}).empty());
  // The row count must match config.json's derivation.
  WeightLoader w2(ck, "model.", Device::kCpu);
  try {
    load_ngram_table(w2, prefix, 26, 3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 24 rows in 12 tensors"), std::string::npos) << e.what();
  }
}

TEST(Qwen4ExpModel, MissingShardIsNamed) {
  TempDir tmp;
  const std::string dir = tmp.sub("gap");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{}";
  const std::string prefix = "x.ngram_embedding.";
  std::vector<std::pair<std::string, Tensor>> f;
  for (int s : {0, 1, 3}) f.emplace_back(prefix + "shard_" + std::to_string(s) + ".weight", Tensor::zeros({2, 3}, DType::kBF16));
  write_safetensors(dir + "/a.safetensors", f);
  Checkpoint ck = Checkpoint::open(dir);
  WeightLoader w(ck, "", Device::kCpu);
  try {
    load_ngram_table(w, prefix, 6, 3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard_2.weight' is missing"), std::string::npos) << e.what();
  }
}

// ---- bad checkpoints ----

// Rewrites DIR/config.json through `edit` and expects load_model to fail mentioning `needle`.
template <class Edit>
void expect_config_error(const std::string& dir, Edit edit, const std::string& needle) {
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  const nlohmann::json saved = cfg;
  edit(cfg);
  std::ofstream(dir + "/config.json") << cfg.dump();
  try {
    load_model(dir);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/config.json") << saved.dump();
}

TEST(Qwen4ExpModel, BadConfigsNameTheField) {
  TempDir tmp;
  const std::string dir = write_tiny_qwen4_exp(tmp.sub("m"), {});
  expect_config_error(dir, [](auto& c) { c.erase("indexer_budget"); }, "indexer_budget");
  expect_config_error(dir, [](auto& c) { c["indexer_kv_heads"] = 2; }, "indexer_kv_heads");
  expect_config_error(dir, [](auto& c) { c["indexer_budget"] = 10; }, "indexer_budget");
  expect_config_error(dir, [](auto& c) { c["ple_layer_ids"] = {3}; }, "ple_layer_ids");
  expect_config_error(dir, [](auto& c) { c["layer_types"][0] = "sliding"; }, "layer_types");
  expect_config_error(dir, [](auto& c) { c["output_gate_type"] = "tanh"; }, "output_gate_type");
  expect_config_error(dir, [](auto& c) { c["hc_count"] = 1; }, "hc_count");
  expect_config_error(dir, [](auto& c) { c["eos_token_id"] = nullptr; }, "eos_token_id");
  // A seed that does not belong to the checkpoint: the stored hash multipliers disagree.
  expect_config_error(dir, [](auto& c) { c["seed"] = 100; }, "layer_multipliers");
  // A base that changes the prime vocabularies.
  expect_config_error(dir, [](auto& c) { c["ngram_vocab_size_base"] = 30; }, "ngram_heads_vocab_sizes");
  // A config whose experts do not match the tensors.
  expect_config_error(dir, [](auto& c) { c["moe_intermediate_size"] = 6; }, "experts.0.gate_proj.weight");
  EXPECT_NO_THROW(load_model(dir));
}

TEST(Qwen4ExpModel, UnexpectedTensorIsAnError) {
  TempDir tmp;
  const std::string dir = write_tiny_qwen4_exp(tmp.sub("m"), {});
  write_safetensors(dir + "/extra.safetensors", {{"model.norm.weight", Tensor::zeros({16}, DType::kBF16)}});
  try {
    load_model(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.norm.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata::testing
