// Shared by the tensor-parallel tests: running a function on rank threads, a sharded model's
// logits and load error, and a fixture wide enough for 4 ranks.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

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

// Logits of `dir` on `n` ranks (rank 0's), in `mode`; `ep`: whole experts per rank. Every rank
// must see the same logits.
inline Tensor sharded_logits(const std::string& dir, int n, const std::vector<int32_t>& prompt,
                             const std::string& mode, bool ep) {
  dist::LocalGroup group(n);
  std::vector<Tensor> got(static_cast<size_t>(n));
  on_ranks(n, [&](int r) {
    LoadOptions o;
    o.parallel = dist::Parallel{r, n, &group.rank(r), ep};
    auto model = load_model(dir, o);
    got[size_t(r)] = sequence_logits(*model, prompt, mode);
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(max_abs_diff(got[size_t(r)], got[0]), 0.0) << "rank " << r << " disagrees";
  return got[0];
}

// The error of loading `dir` as rank 0 of `size` (on `device`); empty when it loads.
inline std::string sharded_load_error(const std::string& dir, int size, bool ep = false,
                                      Device device = Device::kCpu) {
  dist::LocalGroup group(size);
  LoadOptions o;
  o.device = device;
  o.parallel = dist::Parallel{0, size, &group.rank(0), ep};
  try {
    load_model(dir, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The fixtures have 2 GDN key heads; 4 ranks need 4. A fixture (by default qwen3_5_moe_tiny)
// widened to `key_heads` GDN key heads and `value_heads` value heads (fresh random bf16 GDN
// weights, the rest kept), in a temporary folder removed with the object. qwen3_5_moe_tiny over
// 4 ranks: 2 kv heads replicated, 2 experts (or 8 columns of every expert) and 10 shared-expert
// columns per rank.
struct WidenedModel {
  std::string dir;

  explicit WidenedModel(const std::string& fixture = "qwen3_5_moe_tiny", int64_t key_heads = 4,
                        int64_t value_heads = 8) {
    namespace fs = std::filesystem;
    const Fixture f = load_fixture(fixture);
    const fs::path path = fs::temp_directory_path() / ("strata_tp4_" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
    dir = path.string();
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(f.dir + "/config.json"));
    nlohmann::json& text = cfg.contains("text_config") ? cfg["text_config"] : cfg;
    const int64_t hk = key_heads, hv = value_heads, dk = text["linear_key_head_dim"],
                  dv = text["linear_value_head_dim"];
    const int64_t hidden = text["hidden_size"], kw = text["linear_conv_kernel_dim"];
    text["linear_num_key_heads"] = hk;
    text["linear_num_value_heads"] = hv;
    std::ofstream(path / "config.json") << cfg.dump(2);
    std::filesystem::copy_file(f.dir + "/generation_config.json", path / "generation_config.json");
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
    write_safetensors((path / "model.safetensors").string(), tensors);
  }
  ~WidenedModel() { std::filesystem::remove_all(dir); }
  WidenedModel(const WidenedModel&) = delete;
  WidenedModel& operator=(const WidenedModel&) = delete;
};

}  // namespace strata::testing
