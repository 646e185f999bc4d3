// The CUDA token mixers and experts against the CPU reference on the same inputs: paged
// attention, plain and gated (decode split-K and prefill tiles, GQA groups of 2 and 4, head dims
// 16 to 256, and the production shapes: 16 query heads, 2 kv heads, thousands of tokens),
// causal conv1d, the GDN gates, the gated delta rule (chunked and recurrent), the fused GDN
// decode step (one token a sequence, and up to 16), MoE routing and experts (GEMV and
// grouped-GEMM paths).
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../unit/batch_test_util.h"
#include "cuda_test_util.h"

namespace strata::testing {
namespace {

// hq query heads over hkv KV heads of head dim d; paged_attention, then paged_attention_gated.
// q_scale > 1 sharpens the softmax; strict also holds the error to 2e-2 of the reference's
// largest element when that is below 1 (long contexts average the values down).
// bs: tokens a KV page (the engine's default is 16). q_scale 0 makes every score 0 (the output is
// the mean of the causal prefix's values, whatever Q K^T computes); flat_v gives every key the
// same value row (the output is that row, whatever the probabilities are, if they sum to 1).
// The cache rows past each sequence's last token (in its last page) hold NaN: no kernel may let
// them into an output (0 x NaN is NaN), as a reused page's stale bytes could be anything.
void check_attention(int64_t d, int64_t hkv, const std::vector<int32_t>& q_lens,
                     const std::vector<int32_t>& ctx, int64_t hq = 4, float q_scale = 1.f, bool strict = false,
                     int bs = 16, bool flat_v = false) {
  std::mt19937 rng(int(d) * 31 + int(hkv) * 7 + int(q_lens.size()));
  int blocks = 0;
  ForwardBatch batch = make_batch(q_lens, ctx, bs, &blocks);
  const int64_t t = batch.num_tokens();
  for (bool gated : {false, true}) {
    const std::string at = std::string(gated ? "gated, " : "") + "head dim " + std::to_string(d) + ", " +
                           std::to_string(hq) + "/" + std::to_string(hkv) + " heads, " +
                           std::to_string(q_lens.size()) + " seqs, page " + std::to_string(bs);
    Tensor q = rand_bf16_values({t, hq, d}, rng, q_scale), k = rand_bf16_values({t, hkv, d}, rng),
           v = rand_bf16_values({t, hkv, d}, rng);
    Tensor kc = rand_bf16_values({blocks, bs, hkv, d}, rng), vc = rand_bf16_values({blocks, bs, hkv, d}, rng);
    Tensor gate = rand_bf16_values({t, hq * d}, rng, 2.f);
    if (flat_v) {
      for (Tensor* x : {&v, &vc}) {
        for (int64_t i = 0; i < x->numel(); ++i) x->data<float>()[i] = float(i % d % 7 - 3) * 0.25f;
      }
    }
    for (const SeqInBatch& sq : batch.seqs) {
      for (int64_t p = sq.ctx_len + sq.q_len; p < int64_t(sq.block_table.size()) * bs; ++p) {
        const int64_t row = int64_t(sq.block_table[size_t(p / bs)]) * bs + p % bs;
        for (Tensor* x : {&kc, &vc}) std::fill_n(x->data<float>() + row * hkv * d, hkv * d, NAN);
      }
    }
    Tensor gkc = to_gpu(kc), gvc = to_gpu(vc);
    Tensor ref = Tensor::empty({t, hq, d}, DType::kF32), got = Tensor::empty({t, hq, d}, DType::kBF16, Device::kCuda);
    const float scale = 1.f / std::sqrt(float(d));
    if (gated) {
      ops::paged_attention_gated(q, k, v, {kc, vc, {}, {}}, batch, scale, gate, ref);
      ops::paged_attention_gated(to_gpu(q), to_gpu(k), to_gpu(v), {gkc, gvc, {}, {}}, batch, scale, to_gpu(gate),
                                 got);
    } else {
      ops::paged_attention(q, k, v, {kc, vc, {}, {}}, batch, scale, ref);
      ops::paged_attention(to_gpu(q), to_gpu(k), to_gpu(v), {gkc, gvc, {}, {}}, batch, scale, got);
    }
    const Tensor got_h = to_host_f32(got);
    EXPECT_LE(rel_err(got_h, ref), kBf16Tol) << at;
    if (strict) {
      double ref_max = 0, err = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        ref_max = std::max(ref_max, double(std::fabs(ref.data<float>()[i])));
        const double e = std::fabs(double(got_h.data<float>()[i]) - ref.data<float>()[i]);
        err = std::max(err, std::isnan(e) ? INFINITY : e);
      }
      EXPECT_LE(err, kBf16Tol * ref_max) << "relative to the largest output, " << at;
    }
    const auto nan_as_zero = [](Tensor x) {
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (std::isnan(x.data<float>()[i])) x.data<float>()[i] = 0.f;
      }
      return x;
    };
    EXPECT_EQ(rel_err(nan_as_zero(to_host_f32(gkc)), nan_as_zero(kc)), 0.0) << "k cache, " << at;
    EXPECT_EQ(rel_err(nan_as_zero(to_host_f32(gvc)), nan_as_zero(vc)), 0.0) << "v cache, " << at;
  }
}

TEST(CudaMixer, PagedAttentionDecodeAndPrefill) {
  STRATA_REQUIRE_GPU();
  for (int64_t d : {16, 32, 64, 128, 256}) {
    for (int64_t hkv : {2, 1}) {                             // GQA groups of 2 and 4
      check_attention(d, hkv, {1, 1, 1}, {0, 5, 40});        // decode: split-K
      check_attention(d, hkv, {1, 1}, {63, 200});            // decode over many pages
      check_attention(d, hkv, {1, 1}, {4500, 17});           // decode at the split cap
      check_attention(d, hkv, {70, 1, 9}, {0, 33, 16});      // prefill tiles, mixed
      check_attention(d, hkv, {130}, {0});                   // several query and key tiles
      check_attention(d, hkv, {100, 64, 3}, {37, 80, 150});  // prefill chunks after cached pages
    }
  }
}

// Decode at production shapes (the tensor-core decode kernel, attention_decode.cu): Qwen3.5's 16
// query heads over 2 kv heads of 256, 40 sequences (two splits each where their keys fill them)
// whose contexts cross the 16-key tiles, the 32-key splits and the pages at every offset, and a
// batch of 256 (one split: the block writes the gated output); head dim 128 at groups of 8, 6,
// 16 and 1; and a speculative verify's few rows a sequence (rows mode), at both head dims.
TEST(CudaMixer, PagedAttentionDecodeProductionShapes) {
  STRATA_REQUIRE_GPU();
  std::vector<int32_t> ones(40, 1), ctx(40);
  for (size_t i = 0; i < ctx.size(); ++i) ctx[i] = int32_t(i * 37 % 97 + (i % 5) * 211);
  ctx[0] = 0, ctx[1] = 15, ctx[2] = 16, ctx[3] = 31, ctx[4] = 32, ctx[5] = 1030;
  check_attention(256, 2, ones, ctx, 16, 2.f, true);
  std::vector<int32_t> ones256(256, 1), ctx256(256);
  for (size_t i = 0; i < ctx256.size(); ++i) ctx256[i] = int32_t(i * 53 % 301);
  check_attention(256, 2, ones256, ctx256, 16, 2.f, true);
  check_attention(128, 2, ones, ctx, 16, 2.f, true);
  check_attention(128, 2, {1, 1, 1}, {300, 7, 64}, 12, 2.f, true);
  check_attention(128, 2, {1, 1}, {500, 33}, 32, 2.f, true);
  check_attention(128, 4, {1, 1}, {500, 33}, 4, 2.f, true);
  check_attention(256, 2, {4, 1, 16, 3}, {100, 0, 2000, 31}, 16, 2.f, true);
  check_attention(128, 2, {4, 2}, {700, 16}, 16, 2.f, true, 32);
}

// Qwen3.5's shape, 16 query heads over 2 kv heads of head dim 256 (the wgmma prefill,
// two heads a block): a long prompt from an empty cache and a chunk after cached pages in one
// batch, neither a whole number of tiles; head dim 128 likewise, and at a group of 3 (one head a
// block).
TEST(CudaMixer, PagedAttentionPrefillProductionShapes) {
  STRATA_REQUIRE_GPU();
  check_attention(256, 2, {2048, 700}, {0, 1000}, 16, 2.f, true);
  check_attention(128, 2, {1000, 333}, {0, 517}, 16, 2.f, true);
  check_attention(128, 2, {300, 129}, {0, 70}, 6, 2.f, true);
}

// The wgmma prefill (head dims 128 and 256, attention_wgmma.cu) at production head dims: varlen
// batches whose query counts are not multiples of its 64-row warpgroup tiles (1, 63, 65, 300; a
// 1-query sequence leaves a warpgroup idle), after cached pages (ctx_len > 0, some not a page
// multiple), GQA groups of 8 (two heads a block) and 1 (one head a block), the engine's 16-token
// pages and 32-token ones; plain and gated (check_attention runs both).
TEST(CudaMixer, PagedAttentionPrefillWgmma) {
  STRATA_REQUIRE_GPU();
  const std::vector<int32_t> q_lens = {1, 63, 65, 300}, ctx = {0, 17, 100, 1000};
  check_attention(256, 2, q_lens, ctx, 16, 2.f, true);       // Qwen3.5: 16 / 2 heads
  check_attention(128, 4, q_lens, ctx, 32, 2.f, true);       // 32 / 4 heads
  check_attention(256, 2, q_lens, ctx, 2, 2.f, true);        // group 1
  check_attention(128, 1, {300, 65, 1}, {64, 0, 7}, 1, 2.f, true);  // one head, group 1
  check_attention(256, 1, {130, 63}, {200, 33}, 8, 2.f, true, 32);  // group 8, 32-token pages
  check_attention(128, 2, {64, 128, 192}, {0, 64, 0}, 16, 2.f, true);  // whole tiles only
}

// paged_kv_write (the draft head's catch-ups) writes the pages the CPU op writes, bf16 and FP8,
// at the Qwen3.5 attention's kv shape (2 heads of 256), a chunk after cached tokens beside a
// fresh sequence, and leaves every other row as it was.
TEST(CudaMixer, PagedKvWriteMatchesCpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(21);
  const int64_t hkv = 2, d = 256, bs = 16;
  int blocks = 0;
  const ForwardBatch batch = make_batch({14, 300}, {1000, 0}, int(bs), &blocks);
  const int64_t t = batch.num_tokens();
  const Tensor k = rand_bf16_values({t, hkv, d}, rng), v = rand_bf16_values({t, hkv, d}, rng);
  const Tensor kc = rand_bf16_values({blocks, bs, hkv, d}, rng), vc = rand_bf16_values({blocks, bs, hkv, d}, rng);
  Tensor gkc = to_gpu(kc), gvc = to_gpu(vc);
  ops::paged_kv_write(k, v, {kc, vc, {}, {}}, batch);
  ops::paged_kv_write(to_gpu(k), to_gpu(v), {gkc, gvc, {}, {}}, batch);
  EXPECT_EQ(rel_err(to_host_f32(gkc), kc), 0.0) << "bf16 keys";
  EXPECT_EQ(rel_err(to_host_f32(gvc), vc), 0.0) << "bf16 values";
  // FP8 pages: the codes and scales bitwise (the CPU encodes the bf16 values the GPU holds).
  ops::PagedKv cpu{Tensor::zeros({blocks, bs, hkv, d}, DType::kF8E4M3), Tensor::zeros({blocks, bs, hkv, d}, DType::kF8E4M3),
                   Tensor::zeros({blocks, bs, hkv}, DType::kUE8M0), Tensor::zeros({blocks, bs, hkv}, DType::kUE8M0)};
  ops::PagedKv gpu{cpu.k.to(Device::kCuda), cpu.v.to(Device::kCuda), cpu.k_scale.to(Device::kCuda),
                   cpu.v_scale.to(Device::kCuda)};
  ops::paged_kv_write(k, v, cpu, batch);
  ops::paged_kv_write(to_gpu(k), to_gpu(v), gpu, batch);
  const char* names[] = {"FP8 keys", "FP8 values", "key scales", "value scales"};
  const Tensor* want[] = {&cpu.k, &cpu.v, &cpu.k_scale, &cpu.v_scale};
  const Tensor* got[] = {&gpu.k, &gpu.v, &gpu.k_scale, &gpu.v_scale};
  for (int i = 0; i < 4; ++i) {
    const Tensor host = got[i]->to(Device::kCpu);
    EXPECT_EQ(std::memcmp(host.raw(), want[i]->raw(), host.nbytes()), 0) << names[i];
  }
}

// The wgmma prefill's two products apart, to tell from one run which one is wrong: with Q = 0
// only O += P V (V read transposed) and the softmax sums matter; with every value row the same,
// only the softmax normalization and the epilogue (Q K^T must merely be finite).
TEST(CudaMixer, PagedAttentionPrefillWgmmaProducts) {
  STRATA_REQUIRE_GPU();
  const std::vector<int32_t> q_lens = {65, 300}, ctx = {0, 100};
  for (int64_t d : {128, 256}) {
    check_attention(d, 2, q_lens, ctx, 16, 0.f, true);                  // P V alone
    check_attention(d, 2, q_lens, ctx, 16, 2.f, true, 16, true);        // softmax and epilogue alone
  }
}

void check_conv1d(int64_t c, int64_t kw, const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx) {
  std::mt19937 rng(int(11 + c + kw));
  int blocks = 0;
  ForwardBatch batch = make_batch(q_lens, ctx, 16, &blocks);
  const int64_t t = batch.num_tokens(), seqs = int64_t(q_lens.size());
  Tensor x = rand_bf16_values({t, c}, rng), w = rand_bf16_values({c, kw}, rng, 0.5f);
  Tensor state = rand_bf16_values({seqs, kw - 1, c}, rng), gstate = to_gpu(state), gstate2 = to_gpu(state);
  Tensor ref = Tensor::empty({t, c}, DType::kF32), got = Tensor::empty({t, c}, DType::kBF16, Device::kCuda);
  ops::causal_conv1d(x, w, state, batch, ref);
  ops::causal_conv1d(to_gpu(x), to_gpu(w), gstate, batch, got);
  const std::string at = std::to_string(t) + " tokens, " + std::to_string(c) + " channels, width " + std::to_string(kw);
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << at;
  EXPECT_LE(rel_err(to_host_f32(gstate), state), 1e-6) << at;
  // causal_conv1d_split into three column blocks (q, k, v in Gated DeltaNet): each block
  // against the same columns of the reference, and the state as before.
  const std::vector<int64_t> widths = {c / 4, c / 4, c - 2 * (c / 4)};
  std::vector<Tensor> parts, refs;
  for (int64_t wd : widths) {
    parts.push_back(Tensor::empty({t, wd}, DType::kBF16, Device::kCuda));
    refs.push_back(Tensor::empty({t, wd}, DType::kF32));
  }
  ops::split_columns(ref, refs);
  ops::causal_conv1d_split(to_gpu(x), to_gpu(w), gstate2, batch, parts);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_LE(rel_err(to_host_f32(parts[i]), refs[i]), kBf16Tol) << "split block " << i << ", " << at;
  }
  EXPECT_LE(rel_err(to_host_f32(gstate2), state), 1e-6) << "split, " << at;
}

TEST(CudaMixer, CausalConv1d) {
  STRATA_REQUIRE_GPU();
  check_conv1d(40, 4, {7, 1, 2}, {0, 5, 9});  // token runs that cross sequences, vector path
  check_conv1d(36, 4, {7, 1, 2}, {0, 5, 9});  // channels not a multiple of 8: the scalar path
  check_conv1d(40, 3, {7, 1, 2}, {0, 5, 9});  // another width: the scalar path
  check_conv1d(64, 4, {7, 1, 2, 40}, {0, 5, 9, 3});  // split blocks of 16, 16, 32: the vector path writes them
  // The Qwen3.5 conv dim, a 2048-token span, one after a cached prefix, a single token.
  check_conv1d(8192, 4, {2048, 301, 1}, {0, 700, 5});
}

TEST(CudaMixer, GdnGates) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(12);
  Tensor a = rand_bf16_values({5, 6}, rng, 10.f), b = rand_bf16_values({5, 6}, rng);
  Tensor a_log = rand_bf16_values({6}, rng), dt = rand_bf16_values({6}, rng);
  Tensor g = Tensor::empty({5, 6}, DType::kF32), beta = Tensor::empty({5, 6}, DType::kF32);
  Tensor gg = Tensor::empty({5, 6}, DType::kF32, Device::kCuda), gb = Tensor::empty({5, 6}, DType::kF32, Device::kCuda);
  ops::gdn_gates(a, b, a_log, dt, g, beta);
  ops::gdn_gates(to_gpu(a), to_gpu(b), to_gpu(a_log, DType::kF32), to_gpu(dt, DType::kF32), gg, gb);
  EXPECT_LE(rel_err(to_host_f32(gg), g), 1e-5);
  EXPECT_LE(rel_err(to_host_f32(gb), beta), 1e-5);
}

// (key, value) head dims: value head dim 24 gives the chunked scan a state column block that is
// not a multiple of 32.
constexpr std::pair<int64_t, int64_t> kGdnHeadDims[] = {{16, 16}, {16, 24}, {128, 128}, {128, 24}};

// hk key heads of dk, ratio value heads of dv per key head; by default spans of one to three
// 64-token chunks, from an empty state and from a cached one. v_scale multiplies the values,
// g_scale sets the log decays' spread (-|N(0, g_scale)| - 0.01).
void check_delta_rule(int64_t dk, int64_t dv, int64_t ratio, ops::GdnAlgorithm algorithm, int64_t hk = 2,
                      const std::vector<int32_t>& q_lens = {70, 1, 5, 130, 150},
                      const std::vector<int32_t>& ctx = {0, 3, 9, 0, 37}, float v_scale = 1.f,
                      float g_scale = 0.5f) {
  std::mt19937 rng(int(dk * 7 + dv * 3 + ratio + hk) + 100 * int(algorithm));
  int blocks = 0;
  ForwardBatch batch = make_batch(q_lens, ctx, 16, &blocks);
  const int64_t t = batch.num_tokens(), slots = int64_t(batch.seqs.size()), hv = hk * ratio;
  Tensor q = rand_bf16_values({t, hk, dk}, rng), k = rand_bf16_values({t, hk, dk}, rng);
  Tensor v = rand_bf16_values({t, hv, dv}, rng, v_scale);
  Tensor g = negative_gates({t, hv}, rng, g_scale), beta = unit_interval({t, hv}, rng);
  Tensor state = rand_bf16_values({slots, hv, dk, dv}, rng, 0.1f * v_scale),
         gstate = to_gpu(state, DType::kF32);
  Tensor ref = Tensor::empty({t, hv, dv}, DType::kF32), got = Tensor::empty({t, hv, dv}, DType::kBF16, Device::kCuda);
  ops::gated_delta_rule(q, k, v, g, beta, state, batch, ref, algorithm);
  ops::gated_delta_rule(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(g, DType::kF32), to_gpu(beta, DType::kF32), gstate,
                        batch, got, algorithm);
  const char* name = algorithm == ops::GdnAlgorithm::kChunked ? "chunked" : "recurrent";
  const double out_err = rel_err(to_host_f32(got), ref), state_err = rel_err(to_host_f32(gstate), state);
  if (dk == 128 && dv == 128) {
    std::printf("  %s dk %lld dv %lld ratio %lld, v x%g, gates x%g: out %.3g, state %.3g\n", name, (long long)dk,
                (long long)dv, (long long)ratio, v_scale, g_scale, out_err, state_err);
  }
  EXPECT_LE(out_err, kBf16Tol) << name << " dk " << dk << " dv " << dv << " ratio " << ratio;
  // The tensor-core chunked path (128 x 128 heads) multiplies in TF32 and fp16 (a 10-bit
  // mantissa, fp32 sums): its state is good to 1e-3 of max(1, |state|) (measured 3.0e-4 to
  // 7.5e-4 on the H200 over these cases), the fp32 kernels to 1e-4; both far inside the bf16
  // outputs' 2e-2.
  const double state_tol = algorithm == ops::GdnAlgorithm::kChunked && dk == 128 && dv == 128 ? 1e-3 : 1e-4;
  EXPECT_LE(state_err, state_tol)
      << name << " state, dk " << dk << " dv " << dv << " ratio " << ratio;
}

TEST(CudaMixer, GatedDeltaRuleChunkedAndRecurrent) {
  STRATA_REQUIRE_GPU();
  for (const auto& [dk, dv] : kGdnHeadDims) {
    for (int64_t ratio : {1, 2, 3}) {
      check_delta_rule(dk, dv, ratio, ops::GdnAlgorithm::kChunked);
      check_delta_rule(dk, dv, ratio, ops::GdnAlgorithm::kRecurrent);
    }
  }
}

// The Qwen3.5 / Qwen3-Next shape (16 key heads, 32 value heads of 128 x 128), on the tensor-core
// path: a 2048-token span from an empty state, a 300-token one (a partial last chunk) after a
// cached prefix, and a single token.
TEST(CudaMixer, GatedDeltaRuleChunkedAtProductionShape) {
  STRATA_REQUIRE_GPU();
  check_delta_rule(128, 128, 2, ops::GdnAlgorithm::kChunked, 16, {2048, 300, 1}, {0, 700, 5});
}

// The same shape at the ranges the tensor-core path's fp16 operands must hold: values (and so U,
// vnew and the state) 100x larger, decays weak enough (about -0.02 a token) that nothing is
// attenuated within a chunk, and decays strong enough (about -4 a token) that most of a chunk's
// factors e^cum underflow fp16.
TEST(CudaMixer, GatedDeltaRuleChunkedRangesAtProductionShape) {
  STRATA_REQUIRE_GPU();
  check_delta_rule(128, 128, 2, ops::GdnAlgorithm::kChunked, 16, {2048, 300}, {0, 700}, 100.f, 0.5f);
  check_delta_rule(128, 128, 2, ops::GdnAlgorithm::kChunked, 16, {2048, 300}, {0, 700}, 1.f, 0.01f);
  check_delta_rule(128, 128, 2, ops::GdnAlgorithm::kChunked, 16, {2048, 300}, {0, 700}, 1.f, 5.f);
}

// The fused step (ops::gdn_decode_step; speculative verify steps take its multi-token kernel)
// against the CPU's composition of the plain ops: outputs, and the recurrent and conv states
// after each sequence's last token. hk key heads of dk, ratio value heads of dv per key head,
// conv width kw; `seed` for the inputs.
void check_decode_step_tokens(int64_t dk, int64_t dv, int64_t hk, int64_t ratio, int64_t kw,
                              const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx, int seed) {
  std::mt19937 rng(seed);
  int blocks = 0;
  ForwardBatch batch = make_batch(q_lens, ctx, 16, &blocks);
  const int64_t t = batch.num_tokens(), slots = int64_t(q_lens.size()), hv = hk * ratio;
  const GdnStepInputs in(rng, t, slots, hk, hv, dk, dv, kw);
  const Tensor &cs = in.conv_state, &st = in.state;
  Tensor gcs = to_gpu(cs), gst = to_gpu(st, DType::kF32);
  Tensor ref = Tensor::empty({t, hv, dv}, DType::kF32), got = Tensor::empty({t, hv, dv}, DType::kBF16, Device::kCuda);
  in.run(batch, ref, gcs, gst, got);
  const std::string at = "dk " + std::to_string(dk) + " dv " + std::to_string(dv) + ", " + std::to_string(hk) +
                         " key heads, ratio " + std::to_string(ratio) + ", conv width " + std::to_string(kw);
  // Both sides keep the conv outputs and the state in fp32.
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << at;
  EXPECT_LE(rel_err(to_host_f32(gst), st), 2e-3) << "state, " << at;
  EXPECT_LE(rel_err(to_host_f32(gcs), cs), 1e-6) << "conv state, " << at;
}

// The fused step's head shapes: the fixtures' head dims and the real models' 128 x 128, plus
// dv 256 at ratios 1, 2, 3 and 8 (clusters of 8, 4, 2 and 1 column slices per value head, 1, 2,
// 4 and 8 columns per lane), at conv width 4 (the models', compiled in) and, at ratio 2, 3 (read
// at run time): f(dk, dv, ratio, kw) for each.
template <class F>
void for_each_decode_step_shape(F f) {
  std::vector<std::pair<int64_t, int64_t>> dims(std::begin(kGdnHeadDims), std::end(kGdnHeadDims));
  dims.push_back({64, 256});
  for (int64_t kw : {4, 3}) {
    for (const auto& [dk, dv] : dims) {
      for (int64_t ratio : {1, 2, 3, 8}) {
        if (ratio == 8 && dv != 256) continue;
        if (kw != 4 && ratio != 2) continue;
        f(dk, dv, ratio, kw);
      }
    }
  }
}

TEST(CudaMixer, FusedGdnDecodeStep) {
  STRATA_REQUIRE_GPU();
  // Three single-token sequences, the first from a fresh state.
  for_each_decode_step_shape([](int64_t dk, int64_t dv, int64_t ratio, int64_t kw) {
    check_decode_step_tokens(dk, dv, 2, ratio, kw, {1, 1, 1}, {0, 4, 17}, int(dk * ratio + dv + kw));
  });
}

TEST(CudaMixer, FusedGdnDecodeStepOfSeveralTokens) {
  STRATA_REQUIRE_GPU();
  // Sequences of 4, 1, 16 (kGdnStepMaxTokens) and 3 tokens in one batch, the 16 from a fresh
  // state (zeros, then its own earlier tokens in the conv window), the others from cached ones.
  const std::vector<int32_t> q_lens = {4, 1, 16, 3}, ctx = {9, 5, 0, 37};
  for_each_decode_step_shape([&](int64_t dk, int64_t dv, int64_t ratio, int64_t kw) {
    check_decode_step_tokens(dk, dv, 2, ratio, kw, q_lens, ctx, int(dk * ratio + dv + kw + 2) + 7);
  });
  // Qwen3.5-35B-A3B: 16 key heads of 128, 32 value heads of 128 (on 132 SMs, column slices of
  // 43, 43 and 42: the state's scalar loads).
  check_decode_step_tokens(128, 128, 16, 2, 4, q_lens, ctx, 128 * 2 + 128 + 4 + 16 + 7);
}

// The fused step's per-token states (ForwardBatch::state_steps: speculative rollback without a
// replay) against the CPU op's, which runs the composition a token at a time: every step slot of
// the state and conv pools within the single-token bounds, and the slots no token of the batch
// stores (the last token's, a one-token sequence's) untouched. 16 key heads of 128 and 32 value
// heads of 128 (Qwen3.5-35B-A3B) and the fixtures' 2 x 32; sequences of 4, 1, 3 and 2 tokens,
// K = 3 step slots each, F32 and BF16 states.
TEST(CudaMixer, FusedGdnDecodeStepPerTokenStates) {
  STRATA_REQUIRE_GPU();
  const auto same_bytes = [](const Tensor& x, const Tensor& y) {
    return x.nbytes() == y.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
  };
  for (const auto& [hk, dk, ratio] : {std::tuple<int64_t, int64_t, int64_t>{16, 128, 2}, {2, 32, 1}}) {
    for (const DType state_dtype : {DType::kF32, DType::kBF16}) {
      std::mt19937 rng(int(hk * dk) + (state_dtype == DType::kF32));
      const int64_t dv = dk, hv = hk * ratio, kw = 4, count = 3;
      const std::vector<int32_t> q_lens = {4, 1, 3, 2}, ctx = {9, 5, 0, 37};
      int blocks = 0;
      ForwardBatch batch = make_batch(q_lens, ctx, 16, &blocks);
      const int64_t t = batch.num_tokens(), seqs = int64_t(q_lens.size()), slots = seqs * (1 + count);
      batch.state_steps = {int32_t(seqs), int32_t(count)};
      // bf16 values, so that the BF16 pool on the GPU starts from the CPU's F32 pool exactly.
      const GdnStepInputs in(rng, t, slots, hk, hv, dk, dv, kw);
      const Tensor &cs = in.conv_state, &st = in.state;
      const Tensor cs0 = to_host_f32(to_gpu(cs)), st0 = to_host_f32(to_gpu(st, DType::kF32));
      Tensor gcs = to_gpu(cs), gst = to_gpu(st, state_dtype);
      Tensor ref = Tensor::empty({t, hv, dv}, DType::kF32), got = Tensor::empty({t, hv, dv}, DType::kBF16, Device::kCuda);
      in.run(batch, ref, gcs, gst, got);
      const Tensor hst = to_host_f32(gst), hcs = to_host_f32(gcs);
      const std::string at = std::to_string(hk) + " x " + std::to_string(dk) + ", " + std::string(dtype_name(state_dtype));
      EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << at;
      int stored = 0;
      for (int64_t s = 0; s < seqs; ++s) {
        for (int64_t j = 0; j < count; ++j) {
          const int64_t slot = seqs + s * count + j;
          const std::string where = at + ", sequence " + std::to_string(s) + ", token " + std::to_string(j);
          if (j + 1 < q_lens[size_t(s)]) {
            // A BF16 pool rounds each stored state once more than the CPU's F32 one.
            EXPECT_LE(rel_err(hst.rows(slot, slot + 1), st.rows(slot, slot + 1)),
                      state_dtype == DType::kF32 ? 2e-3 : 1e-2) << "state, " << where;
            EXPECT_LE(rel_err(hcs.rows(slot, slot + 1), cs.rows(slot, slot + 1)), 1e-6) << "conv state, " << where;
            ++stored;
          } else {
            EXPECT_TRUE(same_bytes(hst.rows(slot, slot + 1), st0.rows(slot, slot + 1))) << "untouched, " << where;
            EXPECT_TRUE(same_bytes(hcs.rows(slot, slot + 1), cs0.rows(slot, slot + 1))) << "untouched, " << where;
          }
        }
      }
      EXPECT_EQ(stored, 3 + 0 + 2 + 1) << at;
      EXPECT_LE(rel_err(hst.rows(0, seqs), st.rows(0, seqs)), state_dtype == DType::kF32 ? 2e-3 : 1e-2) << at;
    }
  }
}

// moe_route_experts on the GPU (routing inside the gate/up pass at decode sizes) against the
// CPU's routing (ids exact, weights to 1e-5) and experts (ref).
void check_route_experts(const Tensor& logits, const Tensor& ids, const Tensor& w, const Tensor& x, const Tensor& gu,
                         const Tensor& down, const Tensor& sgu, const Tensor& sdown, const Tensor& sgate,
                         const Tensor& ref, int k) {
  const int64_t t = x.dim(0);
  Tensor gids = Tensor::empty({t, k}, DType::kI32, Device::kCuda), gw = Tensor::empty({t, k}, DType::kF32, Device::kCuda);
  Tensor got = Tensor::empty(x.shape(), DType::kBF16, Device::kCuda);
  const bool shared = sdown.defined();
  ops::moe_route_experts(to_gpu(logits, DType::kF32), k, true, gids, gw, to_gpu(x), to_gpu(gu), to_gpu(down),
                         shared ? to_gpu(sgu) : Tensor(), shared ? to_gpu(sdown) : Tensor(),
                         shared ? to_gpu(sgate) : Tensor(), got);
  const std::string at = std::to_string(t) + " tokens, " + std::to_string(logits.dim(1)) + " experts, routed inside";
  Tensor back = gids.to(Device::kCpu);
  for (int64_t i = 0; i < t * k; ++i) ASSERT_EQ(back.data<int32_t>()[i], ids.data<int32_t>()[i]) << "pick " << i << ", " << at;
  EXPECT_LE(rel_err(to_host_f32(gw), w), 1e-5) << at;
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << at;
}

void check_moe(int64_t t, int64_t e, int64_t k, int64_t h, int64_t inter) {
  std::mt19937 rng(int(t * 7 + e));
  Tensor logits = rand_bf16_values({t, e}, rng, 2.f);
  Tensor ids = Tensor::empty({t, k}, DType::kI32), w = Tensor::empty({t, k}, DType::kF32);
  Tensor gids = Tensor::empty({t, k}, DType::kI32, Device::kCuda), gw = Tensor::empty({t, k}, DType::kF32, Device::kCuda);
  ops::moe_route_softmax(logits, int(k), true, ids, w);
  ops::moe_route_softmax(to_gpu(logits, DType::kF32), int(k), true, gids, gw);
  Tensor back = gids.to(Device::kCpu);
  for (int64_t i = 0; i < t * k; ++i) ASSERT_EQ(back.data<int32_t>()[i], ids.data<int32_t>()[i]) << "pick " << i;
  EXPECT_LE(rel_err(to_host_f32(gw), w), 1e-5);
  Tensor x = rand_bf16_values({t, h}, rng), gu = rand_bf16_values({e, 2 * inter, h}, rng, 0.05f);
  Tensor down = rand_bf16_values({e, h, inter}, rng, 0.05f);
  Tensor ref = Tensor::empty({t, h}, DType::kF32), got = Tensor::empty({t, h}, DType::kBF16, Device::kCuda);
  ops::moe_experts(x, gu, down, ids, w, ref);
  ops::moe_experts(to_gpu(x), to_gpu(gu), to_gpu(down), gids, gw, got);
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << t << " tokens, " << e << " experts";
  check_route_experts(logits, ids, w, x, gu, down, Tensor(), Tensor(), Tensor(), ref, int(k));
}

// The routed experts plus a gated shared expert: the fused decode pass (t <= 16) and the grouped
// path's composition, against the CPU's composition.
void check_moe_shared(int64_t t, int64_t e, int64_t k, int64_t h, int64_t inter, int64_t si) {
  std::mt19937 rng(int(t * 11 + si));
  Tensor logits = rand_bf16_values({t, e}, rng, 2.f);
  Tensor ids = Tensor::empty({t, k}, DType::kI32), w = Tensor::empty({t, k}, DType::kF32);
  ops::moe_route_softmax(logits, int(k), true, ids, w);
  Tensor x = rand_bf16_values({t, h}, rng), gu = rand_bf16_values({e, 2 * inter, h}, rng, 0.05f);
  Tensor down = rand_bf16_values({e, h, inter}, rng, 0.05f);
  Tensor sgu = rand_bf16_values({t, 2 * si}, rng), sdown = rand_bf16_values({h, si}, rng, 0.05f);
  Tensor sgate = rand_bf16_values({t, 1}, rng, 2.f);
  Tensor ref = Tensor::empty({t, h}, DType::kF32), got = Tensor::empty({t, h}, DType::kBF16, Device::kCuda);
  ops::moe_experts_shared(x, gu, down, ids, w, sgu, sdown, sgate, ref);
  ops::moe_experts_shared(to_gpu(x), to_gpu(gu), to_gpu(down), ids.to(Device::kCuda), w.to(Device::kCuda),
                          to_gpu(sgu), to_gpu(sdown), to_gpu(sgate), got);
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << t << " tokens, shared expert of " << si;
  check_route_experts(logits, ids, w, x, gu, down, sgu, sdown, sgate, ref, int(k));
}

TEST(CudaMixer, MoeRoutingAndExperts) {
  STRATA_REQUIRE_GPU();
  check_moe(3, 8, 3, 64, 32);      // GEMV path
  check_moe(40, 8, 3, 64, 32);     // grouped GEMM
  check_moe(20, 16, 4, 256, 128);  // grouped, one tile per expert
  check_moe(600, 16, 3, 256, 128); // grouped, several tiles per expert
  check_moe(5, 256, 8, 256, 64);   // many experts, GEMV
  check_moe(4, 512, 10, 64, 32);   // routing beyond 256 experts; more than 8 experts per token
  check_moe(2, 8, 2, 4096, 1024);  // several passes over the hidden and intermediate dims
  check_moe(16, 256, 8, 256, 64);  // the most tokens routed inside the gate/up pass
  check_moe(800, 8, 2, 96, 160);   // 128-row wgmma tiles with K of 32 mod 64 and partial column blocks
  check_moe(200, 8, 2, 96, 160);   // the same edges, 50 rows an expert (idle consumer warpgroups)
  check_moe_shared(3, 16, 4, 256, 64, 64);     // fused
  check_moe_shared(2, 16, 4, 256, 64, 1024);   // fused, several passes over the shared expert
  check_moe_shared(40, 16, 4, 256, 64, 128);   // grouped, then the shared expert
}

// The Qwen3.5-35B-A3B expert shape (hidden 2048, intermediate 512, top 8): 128-row wgmma tiles
// over 16 experts (128 rows each on average) and over 256 (64 rows each, so many tiles with an
// idle consumer warpgroup), with the shared expert added by the unpermute; and 64-row mma.sync
// tiles over all 256 experts (5 rows each) with the shared expert.
TEST(CudaMixer, MoeGroupedAtProductionShape) {
  STRATA_REQUIRE_GPU();
  check_moe(256, 16, 8, 2048, 512);
  check_moe_shared(2048, 256, 8, 2048, 512, 512);  // a 2048-token prefill chunk
  check_moe_shared(160, 256, 8, 2048, 512, 512);
}

}  // namespace
}  // namespace strata::testing
