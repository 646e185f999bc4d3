// The Qwen3.5 family through the CUDA backend (bf16 weights and activations) against HF's fp32
// logits in every mode, greedy ids against the CPU path where the CPU's top-2 margin exceeds
// the measured error, CUDA-graph decode (with padding rows) against eager decode, and the
// dummy load format. The Qwen4-Exp fixtures go through the same logits and greedy checks, with
// their n-gram tables left in host memory and graph capture refused; so do DeepSeek-V4's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "../golden/golden_util.h"
#include "cuda_test_util.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/checkpoint.h"
#include "strata/models/model.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/models/qwen4_exp_weights.h"
#include "strata/models/weights.h"
#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/graphs.h"
#endif

namespace strata::testing {
namespace {

// bf16 through every layer. In a bf16 forward of these random models a few positions are far
// off HF's fp32 logits (a GDN head whose output nearly cancels before its scale-free gated norm;
// a router top-k choice that flips on a fp32 logit gap of 0.005-0.05). A CPU emulation of the
// CUDA path's bf16 stores (every op on the CPU ops, each bf16 output rounded) reproduced the
// H200's max errors to 2-3 digits (qwen3_5 1.37, qwen3_next 6.60, qwen3_5_moe 1.51 in full mode)
// and gave, over the fixtures and modes, rms error <= 0.27 and a median per-position max error
// <= 0.19, with reference std 3.1-3.3. So the tight bounds are on those two, and the bound on
// the largest error is loose but still there: the worst measured on the H200 (qwen3_next,
// 6.65 = 2.1 x its std) plus 40%, which a wrong kernel (errors of the logits' own size) breaks.
// All in units of max(1, std(reference)).
constexpr double kRmsTolerance = 0.12, kMedianTolerance = 0.1, kMaxTolerance = 3.0;

// The FP8 fixture (qwen3_5_moe_fp8_tiny, remade in session 36 with GDN's in_proj_qkv and in_proj_z
// quantised, as the published -FP8 checkpoints do): in the modes that read the codes with bf16
// activations (W8A16: stepwise, chunked:7) within the Qwen fixtures' bounds above (H100, session
// 36: max 8.13 = 2.61 std, rms 0.088 std, median per-position max 0.033 std). (The fixture before
// it, without in_proj quantised, had four positions at 3.26 std in every mode, bf16's own error
// there: tools/device/fp8_fixture_bf16_check.sh.)
// The modes whose chunks take the W8A8 paths (the 100-token prompt whole, and chunks of 64: the
// expert tiles at >= 32 rows an expert, the dense projections above 8 rows: GDN in_proj's FP8
// rows and out_proj, attention qkv and o_proj) quantise the activations to e4m3 (4 significant
// bits), which HF's fp32 reference does not: full mode max 9.11 = 2.93 std, rms 0.198 std,
// median per-position max 0.246 std; chunked:64 2.93, 0.194, 0.226 (H100, session 36; the
// fixture before, with in_proj bf16: 3.40, 0.150, 0.161). That is the quantisation's size here:
// HF itself with those inputs quantised (tools/device/fp8_w8a8_hf_check.py) moves 0.185 std rms
// and 0.211 median from its reference, and CUDA's full mode is 0.166 / 0.211 from that emulation
// (two roundings of the activations apart: HF's f32, CUDA's bf16). Bounds: the larger of each plus 10%.
constexpr double kFp8W8A8MaxTolerance = 3.23, kFp8W8A8RmsTolerance = 0.218, kFp8W8A8MedianTolerance = 0.271;

// The NVFP4 and MXFP4 fixtures (qwen3_5_moe_{nv,mx}fp4_tiny, tools/fixtures/make_fixtures_qwen3_5_nvfp4.py):
// their routed experts stay FP4 on the GPU and multiply bf16 activations (W4A16: no activation
// quantisation, unlike FP8's W8A8 modes), their other FP4 weights are dequantised to bf16 at load,
// so in every mode they take the bf16 Qwen fixtures' bounds above. Measured (H100, session 38), in
// std of the reference: NVFP4 full max 0.11, rms 0.013, median 0.033; stepwise 1.74, 0.064, 0.036;
// MXFP4 full 0.15, 0.012, 0.030; stepwise 1.60, 0.062, 0.029.

// DeepSeek-V4's fixtures in the same unit (H100, session 26, the first run of its CUDA forward
// against HF): rms <= 0.3 of the Qwen bound and median per-position max <= 0.42 of it, in every
// mode, but the largest error of deepseek_v4_topk_all is 9.155 = 3.01 std (deepseek_v4_tiny 2.9,
// deepseek_v4_hf_tiny 2.2, deepseek_v4_quant 1.8) at a few positions, as on the FP8 fixture.
// Unlike the Qwen fixtures' (above) it has not been reproduced by a CPU emulation of the bf16
// stores, so this bound is that measurement plus 10%, and the emulation is owed.
constexpr double kDeepseekV4MaxTolerance = 3.3;

// The greedy check's fixed margin, in the same unit: positions whose CPU top-2 margin exceeds it
// must agree. It is above twice the largest GPU-CPU logit difference measured on any fixture
// (qwen3_5_moe: 2 x 0.87 = 0.54 of its std), and it does not widen when the GPU's error grows.
constexpr double kGreedyMargin = 0.6;

#if defined(STRATA_WITH_CUDA)
// The graph test's scale: what bf16 typically leaves at one position.
double bf16_tolerance(const Fixture& f) { return kMedianTolerance * reference_scale(f.logits); }
#endif

// Every mode's CUDA logits against HF's: rms and median per-position max error bounds.
void expect_logits_match_hf(const std::string& name) {
  Fixture f = load_fixture(name);
  auto model = load_model(f.dir, Device::kCuda);
  const double scale = reference_scale(f.logits);
  const bool fp8 = name == "qwen3_5_moe_fp8_tiny";
  const bool deepseek_v4 = name.rfind("deepseek_v4", 0) == 0;
  for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
    const bool w8a8 = fp8 && (mode == "full" || mode == "chunked:64");
    const double max_tol = w8a8 ? kFp8W8A8MaxTolerance : deepseek_v4 ? kDeepseekV4MaxTolerance : kMaxTolerance;
    const double rms_tol = w8a8 ? kFp8W8A8RmsTolerance : kRmsTolerance;
    const double median_tol = w8a8 ? kFp8W8A8MedianTolerance : kMedianTolerance;
    Tensor logits = sequence_logits(*model, f.prompt, mode);
    const ErrorProfile e = error_profile(logits, f.logits);
    std::printf("  cuda %s %-10s max|d| = %.4g (tolerance %.4g), rms %.4g (tolerance %.4g), median per-position "
                "max %.4g (tolerance %.4g)\n", name.c_str(), mode.c_str(), e.max, max_tol * scale, e.rms,
                rms_tol * scale, e.median_position_max, median_tol * scale);
    EXPECT_LE(e.max, max_tol * scale) << name << " mode " << mode;
    EXPECT_LE(e.rms, rms_tol * scale) << name << " mode " << mode;
    EXPECT_LE(e.median_position_max, median_tol * scale) << name << " mode " << mode;
  }
}

// Greedy decoding on the CPU; the GPU's argmax at the same positions (teacher forcing) must
// agree wherever the CPU's top-2 margin is above kGreedyMargin.
void expect_greedy_matches_cpu(const std::string& name) {
  Fixture f = load_fixture(name);
  auto cpu = load_model(f.dir);
  auto gpu = load_model(f.dir, Device::kCuda);
  const int64_t vocab = cpu->info().vocab_size;
  SingleSequence cs(*cpu, int64_t(f.prompt.size() + f.greedy.size()));
  Tensor cl = cs.append(f.prompt, false);
  std::vector<int32_t> seq = f.prompt;
  Tensor ref = Tensor::empty({int64_t(f.greedy.size()), vocab}, DType::kF32);
  for (size_t i = 0; i < f.greedy.size(); ++i) {
    std::memcpy(ref.data<float>() + i * vocab, cl.raw(), vocab * sizeof(float));
    const float* l = cl.data<float>();
    seq.push_back(int32_t(std::max_element(l, l + vocab) - l));
    cl = cs.append({seq.back()}, false);
  }
  // The GPU's logits at the same positions, given the CPU's tokens (teacher forcing).
  std::vector<int32_t> ids(seq.begin(), seq.end() - 1);
  Tensor gl = sequence_logits(*gpu, ids, "stepwise");
  double worst = 0;
  for (size_t i = 0; i < f.greedy.size(); ++i) {
    const float* g = gl.data<float>() + (f.prompt.size() - 1 + i) * vocab;
    const float* r = ref.data<float>() + i * vocab;
    for (int64_t j = 0; j < vocab; ++j) worst = std::max(worst, double(std::fabs(g[j] - r[j])));
  }
  const double margin = kGreedyMargin * reference_scale(f.logits);
  int compared = 0;
  for (size_t i = 0; i < f.greedy.size(); ++i) {
    const float* g = gl.data<float>() + (f.prompt.size() - 1 + i) * vocab;
    const float* r = ref.data<float>() + i * vocab;
    std::vector<float> sorted(r, r + vocab);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] <= margin) continue;  // too close to call at bf16 precision
    ++compared;
    EXPECT_EQ(int32_t(std::max_element(g, g + vocab) - g), seq[f.prompt.size() + i]) << "step " << i;
  }
  std::printf("  cuda %s greedy: %d of %zu steps had a top-2 margin above %.4g and were compared (largest "
              "GPU-CPU logit difference %.4g)\n", name.c_str(), compared, f.greedy.size(), margin, worst);
  EXPECT_GT(compared, 0);
}

class CudaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGolden, LogitsMatchHfInEveryMode) {
  STRATA_REQUIRE_GPU();
  expect_logits_match_hf(GetParam());
}

TEST_P(CudaGolden, GreedyIdsMatchCpuWhereTheMarginIsClear) {
  STRATA_REQUIRE_GPU();
  expect_greedy_matches_cpu(GetParam());
}

#if defined(STRATA_WITH_CUDA)
TEST_P(CudaGolden, GraphDecodeWithPaddingMatchesEager) {
  STRATA_REQUIRE_GPU();
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir, Device::kCuda);
  const int64_t vocab = model->info().vocab_size;
  const int seqs = 3, block = 16, steps = 6;  // bucket 4: one padding row
  const int prompt = std::min<int>(20, int(f.prompt.size()));
  const int pages = (prompt + steps + block - 1) / block;
  Caches eager = Caches::allocate(model->info().cache, seqs * pages, block, seqs, Device::kCuda);
  Caches graph = Caches::allocate(model->info().cache, seqs * pages, block, seqs, Device::kCuda);
  // Prefill each sequence (different offsets into the prompt) in both cache sets.
  ForwardBatch b;
  for (int s = 0; s < seqs; ++s) {
    SeqInBatch q;
    q.q_start = s * prompt;
    q.q_len = prompt;
    q.state_slot = s;
    for (int p = 0; p < pages; ++p) q.block_table.push_back(s * pages + p);
    b.seqs.push_back(q);
    for (int i = 0; i < prompt; ++i) {
      b.token_ids.push_back(f.prompt[(s * 5 + i) % f.prompt.size()]);
      b.positions.push_back(i);
    }
    b.logit_rows.push_back(s * prompt + prompt - 1);
  }
  Tensor l1, l2;
  model->forward(b, eager, l1);
  model->forward(b, graph, l2);
  ForwardBatch d;
  for (int s = 0; s < seqs; ++s) {
    SeqInBatch q = b.seqs[s];
    q.q_start = s;
    q.q_len = 1;
    q.ctx_len = prompt;
    d.seqs.push_back(q);
    d.token_ids.push_back(int32_t((s * 37 + 11) % vocab));
    d.positions.push_back(prompt);
    d.logit_rows.push_back(s);
  }
  ops::cuda::DecodeGraphs graphs(vocab);
  ASSERT_TRUE(graphs.eligible(d));
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor le;
    model->forward(d, eager, le);
    Tensor lg = graphs.run(d, [&](const ForwardBatch& fb, Tensor& logits) { model->forward(fb, graph, logits); });
    Tensor he = le.to(Device::kCpu), hg = lg.to(Device::kCpu);
    worst = std::max(worst, max_abs_diff(hg, he));
    for (int s = 0; s < seqs; ++s) {
      const float* row = he.data<float>() + s * vocab;
      d.token_ids[s] = int32_t(std::max_element(row, row + vocab) - row);
      d.positions[s] += 1;
      d.seqs[s].ctx_len += 1;
    }
  }
  std::printf("  cuda %s graph vs eager decode: max|d| = %.3g over %d steps (%d graphs)\n", GetParam().c_str(),
              worst, steps, graphs.captured());
  EXPECT_EQ(graphs.captured(), 1);
  EXPECT_LE(worst, 0.05 * bf16_tolerance(f));
}
#endif

TEST_P(CudaGolden, DummyWeightsLoadOnBothDevices) {
  STRATA_REQUIRE_GPU();
  Fixture f = load_fixture(GetParam());
  auto cpu = load_model(f.dir, LoadOptions{Device::kCpu, LoadFormat::kDummy, {}});
  auto gpu = load_model(f.dir, LoadOptions{Device::kCuda, LoadFormat::kDummy, {}});
  const std::vector<int32_t> ids(f.prompt.begin(), f.prompt.begin() + std::min<size_t>(12, f.prompt.size()));
  // The FP8 fixture's projections multiply quantised activations on CUDA where a step has more
  // than 8 rows (W8A8): one token a step keeps them exact (W8A16), as the CPU is.
  const std::string mode = GetParam() == "qwen3_5_moe_fp8_tiny" ? "stepwise" : "full";
  Tensor c = sequence_logits(*cpu, ids, mode);
  Tensor g = sequence_logits(*gpu, ids, mode);
  double scale = 1;
  for (int64_t i = 0; i < c.numel(); ++i) scale = std::max(scale, double(std::fabs(c.data<float>()[i])));
  std::printf("  cuda %s dummy weights, %s: max|d| = %.4g (tolerance %.4g)\n", GetParam().c_str(), mode.c_str(),
              max_abs_diff(g, c), 0.05 * scale);
  if (mode != "full") {
    std::printf("  cuda %s dummy weights, full (W8A8 projections, informative): max|d| = %.4g\n", GetParam().c_str(),
                max_abs_diff(sequence_logits(*gpu, ids, "full"), sequence_logits(*cpu, ids, "full")));
  }
  // The CPU keeps the random values in fp32, the GPU rounds them to bf16.
  EXPECT_LE(max_abs_diff(g, c), 0.05 * scale);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden,
                         ::testing::Values("qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny",
                                           "qwen3_5_moe_fp8_tiny", "qwen3_5_moe_nvfp4_tiny",
                                           "qwen3_5_moe_mxfp4_tiny"));

// A quantised fixture's model bytes on the GPU against the CPU's: the routed experts stay
// compressed there, so the GPU holds less than half the CPU's F32 bytes by at least `saving` bytes
// an expert weight. (The other weights are dequantised to bf16: half the CPU's bytes, but for the
// vectors, norms and gates, F32 on both and a few KB here.)
void expect_experts_stay_compressed(const std::string& fixture, double saving) {
  const std::string dir = fixture_dir(fixture);
  auto cpu = load_model(dir);
  auto gpu = load_model(dir, Device::kCuda);
  const nlohmann::json c = read_json_file(dir + "/config.json");
  const double experts = double(c["num_experts"].get<int64_t>()) * 3 * c["moe_intermediate_size"].get<int64_t>() *
                         c["hidden_size"].get<int64_t>() * c["num_hidden_layers"].get<int64_t>();
  const double cpu_bytes = double(cpu->info().weight_bytes), gpu_bytes = double(gpu->info().weight_bytes);
  std::printf("  %s: %.0f expert weights; CPU holds %.0f bytes, GPU %.0f\n", fixture.c_str(), experts, cpu_bytes,
              gpu_bytes);
  EXPECT_LE(gpu_bytes, cpu_bytes / 2 - saving * experts);
}

// FP8 experts: codes and per-row scales, 1 + 4/128 bytes a weight; the bound leaves 0.8 of a
// byte a weight for the saving (about 0.96). The logits and greedy tests above run on those codes.
TEST(CudaGoldenFp8, RoutedExpertsStayFp8OnTheGpu) {
  STRATA_REQUIRE_GPU();
  expect_experts_stay_compressed("qwen3_5_moe_fp8_tiny", 0.8);
}

// NVFP4 experts: codes, e4m3 scales and the global expanded to one F32 a row, 0.5 + 1/16 + 4/K
// bytes a weight (about 0.58 here); the bound leaves 1.2 of a byte a weight (about 1.42).
TEST(CudaGoldenNvfp4, RoutedExpertsStayFp4OnTheGpu) {
  STRATA_REQUIRE_GPU();
  expect_experts_stay_compressed("qwen3_5_moe_nvfp4_tiny", 1.2);
}

// MXFP4 experts: codes and ue8m0 scales, 0.5 + 1/32 bytes a weight; the same bound.
TEST(CudaGoldenMxfp4, RoutedExpertsStayFp4OnTheGpu) {
  STRATA_REQUIRE_GPU();
  expect_experts_stay_compressed("qwen3_5_moe_mxfp4_tiny", 1.2);
}

// ---- Qwen4-Exp (the n-gram tables stay in host memory) ----

class CudaGoldenQwen4Exp : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenQwen4Exp, LogitsMatchHfInEveryMode) {
  STRATA_REQUIRE_GPU();
  expect_logits_match_hf(GetParam());
}

TEST_P(CudaGoldenQwen4Exp, GreedyIdsMatchCpuWhereTheMarginIsClear) {
  STRATA_REQUIRE_GPU();
  expect_greedy_matches_cpu(GetParam());
}

// The loader the model uses, on CUDA: every n-gram table shard is a host view of the mapped
// checkpoint (the same bytes, not a copy), everything else is on the GPU, and the model's
// weight_bytes (what the GPU holds) leaves the tables out.
TEST_P(CudaGoldenQwen4Exp, NgramTablesStayInHostMemory) {
  STRATA_REQUIRE_GPU();
  const std::string dir = fixture_dir(GetParam());
  Checkpoint ckpt = Checkpoint::open(dir);
  const Qwen4ExpConfig cfg = parse_qwen4_exp_config(ckpt.config(), ckpt.config_path());
  WeightLoader w(ckpt, WeightLoader::detect_prefix(ckpt), Device::kCuda);
  const Qwen4ExpWeights weights = load_qwen4_exp_weights(w, cfg);
  int tables = 0;
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    const Qwen4ExpLayerWeights& l = weights.layers[i];
    EXPECT_EQ(l.moe.router.device(), Device::kCuda) << "layer " << i;
    if (!l.has_ple) continue;
    ASSERT_FALSE(l.ple.table.empty()) << "layer " << i;
    for (const Tensor& shard : l.ple.table) {
      EXPECT_EQ(shard.device(), Device::kCpu) << "layer " << i;
      ++tables;
    }
    const std::string prefix = w.prefix() + "layers." + std::to_string(i) + ".ple.ple_embedding.ngram_embedding.";
    const std::string first = ckpt.has(prefix + "shard_0.weight") ? prefix + "shard_0.weight" : prefix + "weight";
    EXPECT_EQ(l.ple.table[0].raw(), ckpt.get(first).raw()) << "layer " << i << ": the shard is a copy";
    EXPECT_EQ(l.ple.key_proj.device(), Device::kCuda) << "layer " << i;
    EXPECT_EQ(l.ple.conv.device(), Device::kCuda) << "layer " << i;
  }
  EXPECT_GT(tables, 0);
  EXPECT_GT(weights.host_table_bytes, 0u);
  auto model = load_model(dir, Device::kCuda);
  EXPECT_EQ(model->info().weight_bytes, w.bytes_loaded());
}

#if defined(STRATA_WITH_CUDA)
// A Qwen4-Exp forward syncs with the host inside, so a decode graph of it is refused by name.
TEST_P(CudaGoldenQwen4Exp, GraphCaptureIsRefused) {
  STRATA_REQUIRE_GPU();
  Fixture f = load_fixture(GetParam());
  auto model = load_model(f.dir, Device::kCuda);
  const int block = 16, prompt = 5;
  Caches caches = Caches::allocate(model->info().cache, 1, block, 1, Device::kCuda);
  ForwardBatch b;
  SeqInBatch s;
  s.q_len = prompt;
  s.state_slot = 0;
  s.block_table = {0};
  b.seqs.push_back(s);
  for (int i = 0; i < prompt; ++i) {
    b.token_ids.push_back(f.prompt[i]);
    b.positions.push_back(i);
  }
  b.logit_rows.push_back(prompt - 1);
  Tensor logits;
  model->forward(b, caches, logits);
  ForwardBatch d = b;
  d.seqs[0].q_len = 1;
  d.seqs[0].ctx_len = prompt;
  d.token_ids = {f.prompt[prompt]};
  d.positions = {prompt};
  d.logit_rows = {0};
  ops::cuda::DecodeGraphs graphs(model->info().vocab_size);
  ASSERT_TRUE(graphs.eligible(d));
  auto forward = [&](const ForwardBatch& fb, Tensor& l) { model->forward(fb, caches, l); };
  (void)graphs.run(d, forward);  // the first step of a bucket runs eagerly
  d.seqs[0].ctx_len += 1;
  d.positions[0] += 1;
  try {
    (void)graphs.run(d, forward);
    ADD_FAILURE() << "a graph of a " << GetParam() << " forward was captured";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be captured into a CUDA graph"), std::string::npos) << e.what();
  }
  EXPECT_EQ(graphs.captured(), 0);
  // The backend is usable afterwards: an eager step runs.
  model->forward(d, caches, logits);
  ops::cuda::synchronize();
}
#endif

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenQwen4Exp, ::testing::Values("qwen4_exp_tiny", "qwen4_exp_vl_tiny"));

// DeepSeek-V4 (issue 18) through its CUDA ops: bf16 activations and weights, F32 residual
// streams, hyper-connection mixes and caches; the published names, transformers' own names,
// every compressed entry selected (top-k over all), and FP8/MXFP4 weights dequantised at load.
// The Qwen3.5 family's bounds, not yet measured for this family.
class CudaGoldenDeepseekV4 : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGoldenDeepseekV4, LogitsMatchHfInEveryMode) {
  STRATA_REQUIRE_GPU();
  expect_logits_match_hf(GetParam());
}

TEST_P(CudaGoldenDeepseekV4, GreedyIdsMatchCpuWhereTheMarginIsClear) {
  STRATA_REQUIRE_GPU();
  expect_greedy_matches_cpu(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGoldenDeepseekV4,
                         ::testing::Values("deepseek_v4_tiny", "deepseek_v4_hf_tiny", "deepseek_v4_topk_all",
                                           "deepseek_v4_quant"));

}  // namespace
}  // namespace strata::testing
