// The DeepSeek-V4 cache ops on CUDA (deepseek_v4_attention.cu) against the CPU reference on the
// same inputs, at the Flash shapes: the ratio-4 compressor (overlapping windows, head dim 512:
// 1024 channels a token) and the ratio-128 one over several steps of prefill chunks and decodes
// (rings and pooled entries), the compressed pages, the lightning indexer (64 heads of 128, top
// 512; the choice compared id for id, ties included, over more entries than the select kernel
// has threads) and the attention over the 128-token window plus none, every or the selected
// compressed entries, with sinks.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../unit/batch_test_util.h"
#include "cuda_test_util.h"
#include "strata/ops/deepseek_v4_ops.h"

namespace strata::testing {
namespace {

constexpr int64_t kHeadDim = 512, kHeads = 64, kIndexHeads = 64, kIndexDim = 128, kTopK = 512;
constexpr int kWindow = 128;
constexpr double kF32Tol = 2e-5;

Tensor gpu_empty(Shape shape, DType dtype) { return Tensor::empty(std::move(shape), dtype, Device::kCuda); }

void check_compressor(const ops::CompressorSpec& spec, int block_size,
                      const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>& steps) {
  std::mt19937 rng(unsigned(spec.ratio * 7 + block_size));
  const int64_t width = spec.width(), rows = spec.ring_rows(), seqs = int64_t(steps[0].first.size());
  const Tensor ape = rand_bf16_values({spec.ratio, width}, rng);
  Tensor ring_kv = Tensor::zeros({seqs, rows, width}, DType::kF32), ring_gate = ring_kv.to_f32();
  Tensor gring_kv = ring_kv.to(Device::kCuda), gring_gate = ring_gate.to(Device::kCuda);
  int pages = 0;
  for (const auto& st : steps) {
    int p = 0;
    make_batch(st.first, st.second, block_size, &p);
    pages = std::max(pages, p);
  }
  const int64_t per_block = spec.ratio >= block_size ? 1 : block_size / spec.ratio;
  Tensor pool = Tensor::zeros({pages, per_block, spec.head_dim}, DType::kF32), gpool = pool.to(Device::kCuda);
  for (size_t step = 0; step < steps.size(); ++step) {
    int blocks = 0;
    const ForwardBatch b = make_batch(steps[step].first, steps[step].second, block_size, &blocks);
    const int64_t t = b.num_tokens();
    const std::vector<ops::CompressedEntry> entries = ops::closed_entries(b, spec.ratio);
    const Tensor kv = rand_bf16_values({t, width}, rng), gate = rand_bf16_values({t, width}, rng, 2.f);
    const int64_t n = int64_t(entries.size());
    Tensor pooled = Tensor::empty({n, spec.head_dim}, DType::kF32);
    Tensor gpooled = gpu_empty({n, spec.head_dim}, DType::kF32);
    ops::compressor_pool(kv, gate, ape, ring_kv, ring_gate, b, spec, entries, pooled);
    ops::compressor_pool(to_gpu(kv), to_gpu(gate), to_gpu(ape), gring_kv, gring_gate, b, spec, entries, gpooled);
    const std::string at = "ratio " + std::to_string(spec.ratio) + ", step " + std::to_string(step) + " (" +
                           std::to_string(n) + " entries)";
    if (n > 0) expect_close(gpooled, pooled, kF32Tol, "compressor_pool pooled, " + at);
    expect_close(gring_kv, ring_kv, 0.0, "compressor_pool ring kv, " + at);
    expect_close(gring_gate, ring_gate, 0.0, "compressor_pool ring gate, " + at);
    // The same values into both pages.
    ops::store_compressed(pooled, pool, b, block_size, spec.ratio, entries);
    ops::store_compressed(pooled.to(Device::kCuda), gpool, b, block_size, spec.ratio, entries);
    expect_close(gpool, pool, 0.0, "store_compressed pages, " + at);
  }
}

TEST(CudaDeepseekV4Attention, CompressorsOverPrefillChunksAndDecodes) {
  STRATA_REQUIRE_GPU();
  ops::CompressorSpec four{4, int(kHeadDim), true}, wide{128, int(kHeadDim), false};
  // Three sequences: a long prefill in chunks, a decode, a chunk ending mid-window then decodes.
  check_compressor(four, 64, {{{37, 1, 10}, {0, 20, 3}}, {{29, 1, 1}, {37, 21, 13}}, {{1, 1, 6}, {66, 22, 14}}});
  check_compressor(wide, 64, {{{200, 1, 130}, {0, 127, 0}}, {{57, 1, 1}, {200, 128, 130}}, {{1, 1, 126}, {257, 129, 131}}});
}

TEST(CudaDeepseekV4Attention, IndexerChoosesTheCpuEntries) {
  STRATA_REQUIRE_GPU();
  const int ratio = 4, bs = 64;
  for (bool tied : {false, true}) {
    std::mt19937 rng(tied ? 21 : 20);
    // A decode over 2,000 entries (more than the select kernel's 512 threads), a prefill chunk
    // behind 300 entries, a short prompt (fewer entries than top_k: -1 fill).
    int pages = 0;
    const ForwardBatch b = make_batch({1, 9, 6}, {8000, 1200, 0}, bs, &pages);
    const int64_t t = b.num_tokens();
    Tensor k_pool = rand_bf16_values({pages, bs / ratio, kIndexDim}, rng);
    if (tied) {  // every entry the same key: all scores tie, the lower indices win
      for (int64_t i = 0; i < k_pool.numel(); ++i) k_pool.data<float>()[i] = k_pool.data<float>()[i % kIndexDim];
    }
    const Tensor q = rand_bf16_values({t, kIndexHeads, kIndexDim}, rng);
    const Tensor w = rand_bf16_values({t, kIndexHeads}, rng);
    const float score_scale = 1.f / std::sqrt(float(kIndexDim)), weight_scale = 1.f / std::sqrt(float(kIndexHeads));
    Tensor ref = Tensor::empty({t, kTopK}, DType::kI32);
    ops::indexer_top_k(q, w, k_pool, b, bs, ratio, score_scale, weight_scale, ref);
    const Tensor gq = to_gpu(q), gw = to_gpu(w), gk = to_gpu(k_pool);
    Tensor got = gpu_empty({t, kTopK}, DType::kI32);
    ops::indexer_top_k(gq, gw, gk, b, bs, ratio, score_scale, weight_scale, got);
    const std::string what = tied ? " (every score tied)" : "";
    expect_same_ints<int32_t>(got, ref, "indexer_top_k" + what);
    // In two steps (the tensor-parallel form): the same scores and the same choice.
    const int64_t width = ops::indexer_max_visible(b, ratio);
    Tensor scores = Tensor::empty({t, width}, DType::kF32), gscores = gpu_empty({t, width}, DType::kF32);
    ops::indexer_scores(q, w, k_pool, b, bs, ratio, score_scale, weight_scale, scores);
    ops::indexer_scores(gq, gw, gk, b, bs, ratio, score_scale, weight_scale, gscores);
    expect_close(gscores, scores, 0.0, "indexer_scores" + what);
    Tensor sel = gpu_empty({t, kTopK}, DType::kI32);
    ops::indexer_select(gscores, b, ratio, sel);
    expect_same_ints<int32_t>(sel, ref, "indexer_select" + what);
  }
}

void check_attention(const char* mode, int ratio, bool compressed, bool use_selected) {
  std::mt19937 rng(unsigned(30 + ratio + use_selected));
  const int bs = 64;
  int pages = 0;
  // A decode far past the window, a prefill chunk crossing it, a short prompt.
  const ForwardBatch b = make_batch({1, 12, 5}, {1500, 120, 0}, bs, &pages);
  const int64_t t = b.num_tokens();
  const Tensor q = rand_bf16_values({t, kHeads, kHeadDim}, rng, 0.05f), kv = rand_bf16_values({t, kHeadDim}, rng);
  const Tensor sinks = rand_bf16_values({kHeads}, rng, 2.f);
  Tensor kv_pool = rand_bf16_values({pages, bs, kHeadDim}, rng);
  Tensor comp_pool, selected;
  if (compressed) {
    const int64_t per_block = ratio >= bs ? 1 : bs / ratio;
    comp_pool = rand_bf16_values({pages, per_block, kHeadDim}, rng);
  }
  if (use_selected) {
    const Tensor iq = rand_bf16_values({t, 4, 32}, rng), iw = rand_bf16_values({t, 4}, rng);
    const Tensor ik = rand_bf16_values({pages, bs / ratio, 32}, rng);
    selected = Tensor::empty({t, kTopK}, DType::kI32);
    ops::indexer_top_k(iq, iw, ik, b, bs, ratio, 1.f, 1.f, selected);
    ASSERT_GE(selected.data<int32_t>()[5], 0);
    selected.data<int32_t>()[5] = -1;  // a hole in the middle of row 0
  }
  const float scale = 1.f / std::sqrt(float(kHeadDim));
  Tensor ref = Tensor::empty({t, kHeads, kHeadDim}, DType::kF32);
  Tensor gpool = to_gpu(kv_pool, DType::kF32);
  ops::sparse_attention(q, kv, kv_pool, comp_pool, ratio, selected, sinks, b, kWindow, scale, ref);
  Tensor got = gpu_empty({t, kHeads, kHeadDim}, DType::kF32);
  ops::sparse_attention(to_gpu(q), to_gpu(kv), gpool, compressed ? to_gpu(comp_pool) : Tensor(), ratio,
                        use_selected ? selected.to(Device::kCuda) : Tensor(), to_gpu(sinks, DType::kF32), b, kWindow,
                        scale, got);
  expect_close(got, ref, 1e-4, std::string("sparse_attention, ") + mode);
  expect_close(gpool, kv_pool, 0.0, std::string("sparse_attention window pages, ") + mode);
}

TEST(CudaDeepseekV4Attention, WindowCompressedAndSelectedWithSinks) {
  STRATA_REQUIRE_GPU();
  check_attention("window only", 1, false, false);
  check_attention("window + every ratio-128 entry", 128, true, false);
  check_attention("window + the indexer's ratio-4 entries", 4, true, true);
}

}  // namespace
}  // namespace strata::testing
