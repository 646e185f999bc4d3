// Tensor and expert parallelism's sharding math on the CPU. Every rank (a thread with a
// LocalGroup communicator) loads only its shard of a fixture (heads, intermediate columns,
// experts, vocabulary) and runs the same forward; rank 0's logits must match the single-device
// model's in every mode, and every rank must see the same logits. LocalGroup's collectives are
// the host reference reduce; this does not exercise NCCL.
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "../cuda/cuda_test_util.h"
#include "../golden/golden_util.h"
#include "strata/core/error.h"
#include "strata/dist/communicator.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/io/safetensors.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

// Runs fn(rank) on `size` threads; rethrows the first rank's exception.
template <typename Fn>
void on_ranks(int size, Fn fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(LocalGroup, CollectivesMatchTheirDefinitions) {
  const int n = 3;
  dist::LocalGroup group(n);
  std::vector<Tensor> reduced(n), gathered(n), scattered(n), exchanged(n);
  on_ranks(n, [&](int r) {
    dist::Communicator& c = group.rank(r);
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), n);
    Tensor a = Tensor::empty({2, 3}, DType::kF32);
    for (int i = 0; i < 6; ++i) a.data<float>()[i] = float(10 * r + i);
    c.all_reduce_sum(a);
    reduced[size_t(r)] = a;
    Tensor mine = Tensor::empty({1, 2}, DType::kI32), all = Tensor::empty({n, 2}, DType::kI32);
    mine.data<int32_t>()[0] = r;
    mine.data<int32_t>()[1] = 100 + r;
    c.all_gather(mine, all);
    gathered[size_t(r)] = all;
    Tensor in = Tensor::empty({n, 2}, DType::kF32), part = Tensor::empty({1, 2}, DType::kF32);
    for (int i = 0; i < 2 * n; ++i) in.data<float>()[i] = float(r * 1000 + i);
    c.reduce_scatter_sum(in, part);
    scattered[size_t(r)] = part;
    Tensor to = Tensor::empty({n, 1}, DType::kI32), from = Tensor::empty({n, 1}, DType::kI32);
    for (int j = 0; j < n; ++j) to.data<int32_t>()[j] = 10 * r + j;  // slice j goes to rank j
    c.all_to_all(to, from);
    exchanged[size_t(r)] = from;
  });
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(reduced[size_t(r)].data<float>()[i], float(30 + 3 * i)) << r;
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(gathered[size_t(r)].data<int32_t>()[2 * j], j);
      EXPECT_EQ(gathered[size_t(r)].data<int32_t>()[2 * j + 1], 100 + j);
      EXPECT_EQ(exchanged[size_t(r)].data<int32_t>()[j], 10 * j + r) << "rank " << r << " from " << j;
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(scattered[size_t(r)].data<float>()[i], float(3000 + 3 * (2 * r + i))) << r;
    }
  }
}

// Logits of `dir` on `n` ranks (rank 0's), in `mode`.
Tensor sharded_logits(const std::string& dir, int n, const std::vector<int32_t>& prompt, const std::string& mode) {
  dist::LocalGroup group(n);
  std::vector<Tensor> got(static_cast<size_t>(n));
  on_ranks(n, [&](int r) {
    LoadOptions o;
    o.parallel = dist::Parallel{r, n, &group.rank(r)};
    auto model = load_model(dir, o);
    got[size_t(r)] = sequence_logits(*model, prompt, mode);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(max_abs_diff(got[size_t(r)], got[0]), 0.0) << "rank " << r << " disagrees";
  return got[0];
}

class TensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallel, ShardedLogitsMatchTheSingleDeviceModel) {
  const Fixture f = load_fixture(GetParam());
  auto single = load_model(f.dir);
  const int n = 2;
  for (const std::string mode : {"full", "stepwise", "chunked:7"}) {
    const Tensor ref = sequence_logits(*single, f.prompt, mode);
    const double d = max_abs_diff(sharded_logits(f.dir, n, f.prompt, mode), ref);
    std::printf("  %s TP=%d %-10s max|d| vs TP=1 = %.3g\n", GetParam().c_str(), n, mode.c_str(), d);
    EXPECT_LE(d, 1e-4) << GetParam() << " " << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny"));

// The fixtures have 2 GDN key heads; 4 ranks need 4. qwen3_5_moe_tiny widened to 4 key heads
// and 8 value heads (fresh random bf16 GDN weights, the rest kept): 2 kv heads replicated over 4
// ranks, 2 experts and 10 shared-expert columns per rank.
TEST(TensorParallel, FourRanksMatchOneOnAWiderModel) {
  namespace fs = std::filesystem;
  const Fixture f = load_fixture("qwen3_5_moe_tiny");
  const fs::path dir = fs::temp_directory_path() / ("strata_tp4_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(f.dir + "/config.json"));
  nlohmann::json& text = cfg["text_config"];
  const int64_t hk = 4, hv = 8, dk = text["linear_key_head_dim"], dv = text["linear_value_head_dim"];
  const int64_t hidden = text["hidden_size"], kw = text["linear_conv_kernel_dim"];
  text["linear_num_key_heads"] = hk;
  text["linear_num_value_heads"] = hv;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  const Checkpoint ckpt = Checkpoint::open(f.dir);  // sharded over two files
  std::mt19937 rng(44);
  auto random = [&](Shape shape) { return rand_bf16_values(std::move(shape), rng, 0.05f); };
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& n : ckpt.names()) {
    auto ends = [&](const std::string& suffix) {
      return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (n.find("linear_attn.") == std::string::npos) {
      tensors.emplace_back(n, ckpt.get(n));
    } else if (ends("in_proj_qkv.weight")) {
      tensors.emplace_back(n, random({conv_dim, hidden}));
    } else if (ends("in_proj_z.weight")) {
      tensors.emplace_back(n, random({hv * dv, hidden}));
    } else if (ends("in_proj_b.weight") || ends("in_proj_a.weight")) {
      tensors.emplace_back(n, random({hv, hidden}));
    } else if (ends("conv1d.weight")) {
      tensors.emplace_back(n, random({conv_dim, 1, kw}));
    } else if (ends("A_log") || ends("dt_bias")) {
      tensors.emplace_back(n, random({hv}));
    } else if (ends("out_proj.weight")) {
      tensors.emplace_back(n, random({hidden, hv * dv}));
    } else {
      tensors.emplace_back(n, ckpt.get(n));  // norm.weight [dv]
    }
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  auto single = load_model(dir.string());
  for (const std::string mode : {"full", "stepwise"}) {
    const Tensor ref = sequence_logits(*single, f.prompt, mode);
    for (int n : {2, 4}) {
      const double d = max_abs_diff(sharded_logits(dir.string(), n, f.prompt, mode), ref);
      std::printf("  widened qwen3_5_moe_tiny TP=%d %-8s max|d| vs TP=1 = %.3g\n", n, mode.c_str(), d);
      EXPECT_LE(d, 1e-4) << "TP=" << n << " " << mode;
    }
  }
  fs::remove_all(dir);
}

// The error of loading `dir` as rank 0 of `size`; empty when it loads.
std::string sharded_load_error(const std::string& dir, int size) {
  dist::LocalGroup group(size);
  LoadOptions o;
  o.parallel = dist::Parallel{0, size, &group.rank(0)};
  try {
    load_model(dir, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallel, ShardsThatDoNotDivideAreRefusedByName) {
  // qwen3_5_tiny has 2 key heads for the GDN layers.
  const std::string heads = sharded_load_error(load_fixture("qwen3_5_tiny").dir, 4);
  EXPECT_NE(heads.find("linear_num_key_heads"), std::string::npos) << "4 ranks over 2 key heads: '" << heads << "'";
  const std::string family = sharded_load_error(load_fixture("deepseek_v4_tiny").dir, 2);
  EXPECT_NE(family.find("not implemented for this model type"), std::string::npos)
      << "deepseek_v4 sharded: '" << family << "'";
}

}  // namespace
}  // namespace strata::testing
