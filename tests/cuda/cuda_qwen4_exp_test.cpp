// The Qwen4-Exp CUDA ops against the CPU reference on the same (bf16-valued) inputs: grouped and
// gated norms, the hyper-connection ops, the PLE gate, the hashed n-gram ids with their device
// context pool over several steps, the gather from a host n-gram table into device rows, the QSA
// key pooling, block-key store, block selection (exact: same scores, same choice, ties included)
// and attention over the selected tokens; plus the shapes the family brings to shared ops (the
// PLE's 10-tap causal conv, GDN key heads of 8).
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "../unit/batch_test_util.h"
#include "cuda_test_util.h"
#include "strata/io/config.h"
#include "strata/models/qwen4_exp_config.h"
#include "strata/ops/qwen4_exp_ops.h"

namespace strata::testing {
namespace {

Tensor gpu_empty(Shape shape, DType dtype = DType::kBF16) { return Tensor::empty(std::move(shape), dtype, Device::kCuda); }

TEST(CudaQwen4Exp, RmsNormGrouped) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(1);
  const int64_t t = 5, group = 40, groups = 3, c = group * groups;
  Tensor x = rand_bf16_values({t, c}, rng, 2.f), w = rand_bf16_values({c}, rng, 0.3f);
  Tensor ref = Tensor::empty({t, c}, DType::kF32);
  ops::rms_norm_grouped(x, w, group, 1e-6f, ref);
  Tensor gx = to_gpu(x), got = gpu_empty({t, c});
  ops::rms_norm_grouped(gx, to_gpu(w, DType::kF32), group, 1e-6f, got);
  expect_close(got, ref, kBf16Tol, "rms_norm_grouped");
  ops::rms_norm_grouped(gx, to_gpu(w, DType::kF32), group, 1e-6f, gx);  // in place, as the PLE key norm
  expect_close(gx, ref, kBf16Tol, "rms_norm_grouped in place");
}

TEST(CudaQwen4Exp, RmsNormGatedActSigmoidAndSilu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(2);
  const int64_t t = 4, heads = 3, d = 24;
  Tensor x = rand_bf16_values({t, heads, d}, rng), z = rand_bf16_values({t, heads, d}, rng, 2.f);
  Tensor w = rand_bf16_values({d}, rng);
  for (ops::GateActivation act : {ops::GateActivation::kSigmoid, ops::GateActivation::kSilu}) {
    Tensor ref = Tensor::empty({t, heads, d}, DType::kF32), got = gpu_empty({t, heads, d});
    ops::rms_norm_gated_act(x, z, w, 1e-6f, act, ref);
    ops::rms_norm_gated_act(to_gpu(x), to_gpu(z), to_gpu(w, DType::kF32), 1e-6f, act, got);
    const char* name = act == ops::GateActivation::kSigmoid ? "sigmoid" : "silu";
    expect_close(got, ref, kBf16Tol, std::string("rms_norm_gated_act ") + name);
  }
}

TEST(CudaQwen4Exp, HyperConnectionExpandMixInjectWrite) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(3);
  const int s = 3;
  const int64_t t = 6, h = 20, rank = 5;
  Tensor x = rand_bf16_values({t, h}, rng);
  Tensor wide = Tensor::empty({t, s * h}, DType::kF32), gwide = gpu_empty({t, s * h});
  ops::hc_expand(x, s, wide);
  ops::hc_expand(to_gpu(x), s, gwide);
  expect_close(gwide, wide, 0.0, "hc_expand");

  Tensor low = rand_bf16_values({t, rank}, rng, 3.f), glow = to_gpu(low);
  ops::hc_lowrank_act(low, s);
  ops::hc_lowrank_act(glow, s);
  expect_close(glow, low, kBf16Tol, "hc_lowrank_act");

  Tensor normed = rand_bf16_values({t, s * h}, rng), mix = rand_bf16_values({t, s * h}, rng, 2.f);
  Tensor out = Tensor::empty({t, h}, DType::kF32), gout = gpu_empty({t, h});
  ops::hc_mix(normed, mix, s, out);
  ops::hc_mix(to_gpu(normed), to_gpu(mix), s, gout);
  expect_close(gout, out, kBf16Tol, "hc_mix");

  Tensor inject = rand_bf16_values({t, s}, rng, 2.f), ginject = to_gpu(inject, DType::kF32);
  ops::hc_inject_weights(inject, s);
  ops::hc_inject_weights(ginject, s);
  expect_close(ginject, inject, 1e-6, "hc_inject_weights (F32)");
  Tensor inject16 = rand_bf16_values({t, s}, rng, 2.f), ginject16 = to_gpu(inject16);
  ops::hc_inject_weights(inject16, s);
  ops::hc_inject_weights(ginject16, s);
  expect_close(ginject16, inject16, kBf16Tol, "hc_inject_weights (BF16)");

  Tensor residual = rand_bf16_values({t, s * h}, rng), block_out = rand_bf16_values({t, h}, rng);
  Tensor gresidual = to_gpu(residual);
  ops::hc_write(residual, block_out, inject);
  ops::hc_write(gresidual, to_gpu(block_out), ginject);
  expect_close(gresidual, residual, kBf16Tol, "hc_write");
}

TEST(CudaQwen4Exp, PleGate) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(4);
  const int s = 4;
  const int64_t t = 5, h = 32;
  Tensor key = rand_bf16_values({t, s * h}, rng), query = rand_bf16_values({t, s * h}, rng);
  Tensor value = rand_bf16_values({t, h}, rng);
  // One stream with a zero dot product (the signed square root's floor) on each row.
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t i = 0; i < h; ++i) key.data<float>()[(r * s + 1) * h + i] = 0.f;
  }
  Tensor ref = Tensor::empty({t, s * h}, DType::kF32), got = gpu_empty({t, s * h});
  ops::ple_gate(key, query, value, s, ref);
  ops::ple_gate(to_gpu(key), to_gpu(query), to_gpu(value), s, got);
  expect_close(got, ref, kBf16Tol, "ple_gate");
}

// The hash constants of the tiny fixture's second PLE layer.
ops::NgramHashSpec fixture_hash(int64_t* vocab) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/qwen4_exp_tiny";
  const Qwen4ExpConfig c = parse_qwen4_exp_config(read_json_file(dir + "/config.json"), dir + "/config.json");
  *vocab = c.vocab;
  return ngram_table_layout(c, 1).hash;
}

TEST(CudaQwen4Exp, NgramIdsAndContextOverSteps) {
  STRATA_REQUIRE_GPU();
  int64_t vocab = 0;
  const ops::NgramHashSpec spec = fixture_hash(&vocab);
  const int ctx = spec.ngram_size - 1, heads = spec.heads();
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab) - 1);
  const int slots = 4;
  Tensor context = Tensor::zeros({slots, ctx}, DType::kI32), gcontext = context.to(Device::kCuda);
  // Fresh prefills (one with EOS inside, one of a single token), then single tokens and a chunk
  // continuing from the context slots.
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> steps = {
      {{9, 1, 4, 2}, {0, 0, 0, 0}}, {{1, 1, 3, 1}, {9, 1, 4, 2}}, {{1, 6, 1, 1}, {10, 2, 7, 3}}};
  for (size_t step = 0; step < steps.size(); ++step) {
    int blocks = 0;
    ForwardBatch b = make_batch(steps[step].first, steps[step].second, 16, &blocks);
    for (size_t i = 0; i < b.token_ids.size(); ++i) b.token_ids[i] = token(rng);
    b.token_ids[2] = int32_t(spec.eos);  // a segment boundary inside sequence 0's prefill
    if (step == 1) b.token_ids[0] = int32_t(spec.eos);
    const int64_t t = b.num_tokens();
    Tensor ids = Tensor::empty({t, heads}, DType::kI64), gids = gpu_empty({t, heads}, DType::kI64);
    ops::ngram_ids(b, spec, vocab, context, ids);
    ops::ngram_ids(b, spec, vocab, gcontext, gids);
    expect_same_ints<int64_t>(gids, ids, "ids, step " + std::to_string(step));
    expect_same_ints<int32_t>(gcontext, context, "context, step " + std::to_string(step));
  }
}

TEST(CudaQwen4Exp, ShardedEmbeddingGathersHostRowsIntoTheGpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(6);
  const int64_t dim = 8, heads = 3, t = 7;
  std::vector<Tensor> shards;  // host BF16 shards of 5, 1 and 9 rows (as a mmapped table)
  for (int64_t rows : {5, 1, 9}) {
    Tensor f = rand_bf16_values({rows, dim}, rng);
    Tensor b = Tensor::empty({rows, dim}, DType::kBF16);
    for (int64_t i = 0; i < f.numel(); ++i) b.data<uint16_t>()[i] = f32_to_bf16(f.data<float>()[i]);
    shards.push_back(b);
  }
  Tensor ids = Tensor::empty({t, heads}, DType::kI64);
  std::uniform_int_distribution<int64_t> row(0, 14);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = row(rng);
  ids.data<int64_t>()[0] = 5;   // the one-row shard
  ids.data<int64_t>()[1] = 14;  // the last row
  Tensor ref = Tensor::empty({t, heads * dim}, DType::kF32);
  ops::sharded_embedding(shards, ids, ref);
  const Tensor gids = ids.to(Device::kCuda);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    Tensor got = gpu_empty({t, heads * dim}, dt);
    ops::sharded_embedding(shards, gids, got);
    expect_close(got, ref, 0.0, "sharded_embedding into " + std::string(dtype_name(dt)));
  }
  for (const Tensor& s : shards) EXPECT_EQ(s.device(), Device::kCpu);
  ids.data<int64_t>()[3] = 15;  // out of range: the CPU op's check holds for device ids too
  Tensor got = gpu_empty({t, heads * dim});
  EXPECT_THROW(ops::sharded_embedding(shards, ids.to(Device::kCuda), got), Error);
}

// ---- QSA ----

TEST(CudaQwen4Exp, QsaPoolKeysAndStoreBlockKeysOverChunks) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(7);
  const int ratio = 4, bs = 16;
  const int64_t d = 16, keep = ratio - 1;
  // Three sequences through three steps of mixed lengths (blocks completed across steps).
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> steps = {
      {{6, 1, 13}, {0, 0, 0}}, {{1, 7, 2}, {6, 1, 13}}, {{9, 1, 1}, {7, 8, 15}}};
  const int pages = 3 * 2;  // make_batch gives each sequence ceil(tokens / 16) <= 2 pages
  Tensor tail = Tensor::zeros({3, keep, d}, DType::kF32), gtail = to_gpu(tail);
  Tensor cache = Tensor::zeros({pages, bs / ratio, d}, DType::kF32), gcache = to_gpu(cache);
  for (size_t step = 0; step < steps.size(); ++step) {
    int blocks = 0;
    ForwardBatch b = make_batch(steps[step].first, steps[step].second, bs, &blocks);
    ASSERT_LE(blocks, pages);
    const int64_t t = b.num_tokens();
    const int64_t nb = int64_t(ops::qsa_completed_blocks(b, ratio).size());
    Tensor raw = rand_bf16_values({t, d}, rng);
    Tensor pooled = Tensor::empty({nb, d}, DType::kF32), gpooled = gpu_empty({nb, d});
    ops::qsa_pool_keys(raw, tail, b, ratio, pooled);
    ops::qsa_pool_keys(to_gpu(raw), gtail, b, ratio, gpooled);
    const std::string at = "step " + std::to_string(step);
    expect_close(gpooled, pooled, kBf16Tol, "qsa_pool_keys pooled, " + at);
    expect_close(gtail, tail, 0.0, "qsa_pool_keys tail, " + at);
    // The same (bf16) keys into both caches.
    Tensor keys = to_host_f32(gpooled);
    ops::qsa_store_block_keys(keys, cache, b, ratio, bs);
    ops::qsa_store_block_keys(to_gpu(keys), gcache, b, ratio, bs);
    expect_close(gcache, cache, 0.0, "qsa_store_block_keys cache, " + at);
  }
}

void check_select(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& ctx, int ratio, int top,
                  bool tied_keys) {
  std::mt19937 rng(8 + ratio + top);
  const int bs = 16;
  const int64_t heads = 3, d = 16;
  int pages = 0;
  ForwardBatch b = make_batch(q_lens, ctx, bs, &pages);
  const int64_t t = b.num_tokens(), width = int64_t(top) * ratio + ratio - 1;
  Tensor cache = rand_bf16_values({pages, bs / ratio, d}, rng);
  if (tied_keys) {  // every block the same key: all scores tie, the lower blocks win
    for (int64_t i = 0; i < cache.numel(); ++i) cache.data<float>()[i] = cache.data<float>()[i % d];
  }
  Tensor q = rand_bf16_values({t, heads, d}, rng);
  Tensor ref = Tensor::empty({t, width}, DType::kI32), got = gpu_empty({t, width}, DType::kI32);
  const float scale = 0.25f;
  ops::qsa_select(q, cache, b, ratio, bs, top, scale, ref);
  ops::qsa_select(to_gpu(q), to_gpu(cache), b, ratio, bs, top, scale, got);
  expect_same_ints<int32_t>(got, ref, "selected (ratio " + std::to_string(ratio) + ", top " + std::to_string(top) +
                                          (tied_keys ? ", tied" : "") + ")");
}

TEST(CudaQwen4Exp, QsaSelectMatchesTheCpuChoiceExactly) {
  STRATA_REQUIRE_GPU();
  // Short prefixes (all visible), prefill chunks over many blocks, and a decode over more
  // blocks than the kernel has threads (1200 / 4 = 300 > 256).
  check_select({3, 9, 1, 1}, {0, 0, 37, 1200}, 4, 2, false);
  check_select({40, 5}, {0, 70}, 8, 3, false);
  check_select({1, 20}, {900, 30}, 4, 4, true);
}

TEST(CudaQwen4Exp, PagedAttentionOverSelectedTokens) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int bs = 16, ratio = 4, top = 2;
  const int64_t hq = 4, hkv = 2, d = 32, width = int64_t(top) * ratio + ratio - 1;
  int pages = 0;
  ForwardBatch b = make_batch({1, 12, 3}, {60, 0, 25}, bs, &pages);
  const int64_t t = b.num_tokens();
  Tensor q = rand_bf16_values({t, hq, d}, rng), k = rand_bf16_values({t, hkv, d}, rng);
  Tensor v = rand_bf16_values({t, hkv, d}, rng);
  Tensor kc = rand_bf16_values({pages, bs, hkv, d}, rng), vc = rand_bf16_values({pages, bs, hkv, d}, rng);
  Tensor block_cache = rand_bf16_values({pages, bs / ratio, 8}, rng), iq = rand_bf16_values({t, 2, 8}, rng);
  Tensor selected = Tensor::empty({t, width}, DType::kI32);
  ops::qsa_select(iq, block_cache, b, ratio, bs, top, 1.f, selected);
  ASSERT_GE(selected.data<int32_t>()[3], 0);
  selected.data<int32_t>()[3] = -1;  // a hole in the middle of row 0 (15 blocks, 2 chosen)
  Tensor gkc = to_gpu(kc), gvc = to_gpu(vc);
  Tensor ref = Tensor::empty({t, hq, d}, DType::kF32), got = gpu_empty({t, hq, d});
  const float scale = 1.f / std::sqrt(float(d));
  ops::paged_attention_selected(q, k, v, kc, vc, b, selected, scale, ref);
  ops::paged_attention_selected(to_gpu(q), to_gpu(k), to_gpu(v), gkc, gvc, b, selected.to(Device::kCuda), scale, got);
  expect_close(got, ref, kBf16Tol, "paged_attention_selected");
  expect_close(gkc, kc, 0.0, "paged_attention_selected k cache");
  expect_close(gvc, vc, 0.0, "paged_attention_selected v cache");
}

// ---- shared ops at Qwen4-Exp's shapes ----

TEST(CudaQwen4Exp, CausalConv1dOfThePleWidth) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(10);
  const int64_t c = 48, kw = 10;  // (ple_conv_kernel_size - 1) * ngram_size + 1 taps
  Tensor w = rand_bf16_values({c, kw}, rng, 0.5f);
  Tensor state = rand_bf16_values({3, kw - 1, c}, rng), gstate = to_gpu(state);
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> steps = {
      {{12, 3, 1}, {0, 0, 0}}, {{1, 4, 15}, {12, 3, 1}}, {{1, 1, 1}, {13, 7, 16}}};
  for (size_t step = 0; step < steps.size(); ++step) {
    int blocks = 0;
    ForwardBatch b = make_batch(steps[step].first, steps[step].second, 16, &blocks);
    const int64_t t = b.num_tokens();
    Tensor x = rand_bf16_values({t, c}, rng);
    Tensor ref = Tensor::empty({t, c}, DType::kF32), got = gpu_empty({t, c});
    ops::causal_conv1d(x, w, state, b, ref);
    ops::causal_conv1d(to_gpu(x), to_gpu(w), gstate, b, got);
    expect_close(got, ref, kBf16Tol, "causal_conv1d 10 taps, step " + std::to_string(step));
    expect_close(gstate, state, 0.0, "causal_conv1d 10 taps state, step " + std::to_string(step));
  }
}

TEST(CudaQwen4Exp, GatedDeltaRuleWithKeyHeadsOf8) {
  STRATA_REQUIRE_GPU();
  for (ops::GdnAlgorithm algorithm : {ops::GdnAlgorithm::kChunked, ops::GdnAlgorithm::kRecurrent}) {
    std::mt19937 rng(11 + int(algorithm));
    int blocks = 0;
    ForwardBatch b = make_batch({70, 1, 5}, {0, 3, 9}, 16, &blocks);
    const int64_t t = b.num_tokens(), hk = 2, hv = 4, dk = 8, dv = 8;
    Tensor q = rand_bf16_values({t, hk, dk}, rng), k = rand_bf16_values({t, hk, dk}, rng);
    Tensor v = rand_bf16_values({t, hv, dv}, rng);
    Tensor g = rand_bf16_values({t, hv}, rng, 0.5f), beta = rand_bf16_values({t, hv}, rng);
    for (int64_t i = 0; i < g.numel(); ++i) {
      g.data<float>()[i] = -std::fabs(g.data<float>()[i]) - 0.01f;
      beta.data<float>()[i] = 1.f / (1.f + std::exp(-beta.data<float>()[i]));
    }
    Tensor state = rand_bf16_values({3, hv, dk, dv}, rng, 0.1f), gstate = to_gpu(state, DType::kF32);
    Tensor ref = Tensor::empty({t, hv, dv}, DType::kF32), got = gpu_empty({t, hv, dv});
    ops::gated_delta_rule(q, k, v, g, beta, state, b, ref, algorithm);
    ops::gated_delta_rule(to_gpu(q), to_gpu(k), to_gpu(v), to_gpu(g, DType::kF32), to_gpu(beta, DType::kF32), gstate,
                          b, got, algorithm);
    const char* name = algorithm == ops::GdnAlgorithm::kChunked ? "chunked" : "recurrent";
    expect_close(got, ref, kBf16Tol, std::string("gated_delta_rule dk 8 ") + name);
    expect_close(gstate, state, 1e-4, std::string("gated_delta_rule dk 8 ") + name + " state");
  }
}

}  // namespace
}  // namespace strata::testing
