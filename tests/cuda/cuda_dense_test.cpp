// The CUDA dense ops against the CPU reference on the same (bf16-rounded) inputs: linear (GEMV
// and cuBLASLt paths, split outputs), embedding and row gathers, column splits, adds and gates,
// RMSNorm variants, rotary embeddings, random fill, sampling, copies.
#include <cstring>

#include "cuda_test_util.h"
#include "strata/ops/host_read.h"

#if defined(STRATA_WITH_CUDA)
#include "strata/ops/cuda/runtime.h"
#endif

namespace strata::testing {
namespace {

TEST(CudaDense, TensorRoundTrip) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(1);
  Tensor a = rand_bf16_values({5, 7}, rng);
  Tensor back = a.to(Device::kCuda).to(Device::kCpu);
  EXPECT_EQ(std::memcmp(a.raw(), back.raw(), a.nbytes()), 0);
}

TEST(CudaDense, LinearGemvAndCublasLt) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(2);
  for (int64_t t : {1, 2, 3, 5, 8, 9, 40, 130}) {
    for (int64_t k : {64, 256, 2048, 24}) {
      const int64_t n = 96;
      Tensor x = rand_bf16_values({t, k}, rng), w = rand_bf16_values({n, k}, rng, 0.05f);
      Tensor ref = Tensor::empty({t, n}, DType::kF32);
      ops::linear(x, w, ref);
      for (DType out : {DType::kBF16, DType::kF32}) {
        Tensor y = Tensor::empty({t, n}, out, Device::kCuda);
        ops::linear(to_gpu(x), to_gpu(w), y);
        const double e = rel_err(to_host_f32(y), ref);
        EXPECT_LE(e, out == DType::kF32 ? 1e-4 : 8e-3) << "t " << t << " k " << k << " out " << dtype_name(out);
      }
    }
  }
}

TEST(CudaDense, LinearSplitMixedDtypes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(3);
  for (int64_t t : {1, 4, 33}) {
    const int64_t k = 128;
    Tensor x = rand_bf16_values({t, k}, rng), w = rand_bf16_values({10 + 1 + 40, k}, rng, 0.05f);
    Tensor r0 = Tensor::empty({t, 10}, DType::kF32), r1 = Tensor::empty({t, 1}, DType::kF32),
           r2 = Tensor::empty({t, 40}, DType::kF32);
    ops::linear_split(x, w, {r0, r1, r2});
    Tensor g0 = Tensor::empty({t, 10}, DType::kF32, Device::kCuda), g1 = Tensor::empty({t, 1}, DType::kBF16, Device::kCuda),
           g2 = Tensor::empty({t, 40}, DType::kBF16, Device::kCuda);
    ops::linear_split(to_gpu(x), to_gpu(w), {g0, g1, g2});
    EXPECT_LE(rel_err(to_host_f32(g0), r0), 1e-4) << t;
    EXPECT_LE(rel_err(to_host_f32(g1), r1), 8e-3) << t;
    EXPECT_LE(rel_err(to_host_f32(g2), r2), 8e-3) << t;
  }
}

// The residual add + norm fused into the GEMV after it: with and without the residual, F32 and
// BF16 norm weights, split outputs, widths on both GEMV paths (R = 4 and 1), every row count of
// the fused path, the unfused fallbacks (too wide for shared memory; h_out aliasing h), and
// prefill's row counts (the add and the norm in one pass, then the GEMMs).
TEST(CudaDense, AddRmsNormLinearFusedMatchesTheComposition) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(31);
  struct Case {
    int64_t t, k;
    bool resid, w32, alias;
  };
  for (const Case c : {Case{1, 64, true, true, false}, Case{3, 64, false, false, false}, Case{8, 2048, true, false, false},
                       Case{1, 2048, true, true, false}, Case{5, 2048, false, true, false}, Case{8, 4096, true, true, false},
                       Case{2, 2048, true, true, true}, Case{64, 2048, true, false, false},
                       Case{300, 2048, true, true, false}, Case{64, 2048, false, false, false},
                       Case{64, 2048, true, false, true}, Case{40, 72, true, true, false}}) {
    const int64_t n0 = 300, n1 = 1, n2 = 77;
    Tensor h = rand_bf16_values({c.t, c.k}, rng), y = rand_bf16_values({c.t, c.k}, rng);
    Tensor nw = rand_bf16_values({c.k}, rng, 0.1f), w = rand_bf16_values({n0 + n1 + n2, c.k}, rng, 0.05f);
    Tensor h_ref = Tensor::empty({c.t, c.k}, DType::kF32), x_ref = Tensor::empty({c.t, c.k}, DType::kF32);
    Tensor r0 = Tensor::empty({c.t, n0}, DType::kF32), r1 = Tensor::empty({c.t, n1}, DType::kF32),
           r2 = Tensor::empty({c.t, n2}, DType::kF32);
    ops::add_rms_norm_linear(h, c.resid ? y : Tensor(), nw, 1e-6f, true, h_ref, x_ref, w, {r0, r1, r2});
    Tensor gh = to_gpu(h), gy = to_gpu(y);
    Tensor gh_out = c.alias ? gh : Tensor::empty({c.t, c.k}, DType::kBF16, Device::kCuda);
    Tensor gx = Tensor::empty({c.t, c.k}, DType::kBF16, Device::kCuda);
    Tensor g0 = Tensor::empty({c.t, n0}, DType::kF32, Device::kCuda), g1 = Tensor::empty({c.t, n1}, DType::kBF16, Device::kCuda),
           g2 = Tensor::empty({c.t, n2}, DType::kBF16, Device::kCuda);
    ops::add_rms_norm_linear(gh, c.resid ? gy : Tensor(), c.w32 ? to_gpu(nw, DType::kF32) : to_gpu(nw), 1e-6f, true,
                             c.resid ? gh_out : Tensor(), gx, to_gpu(w), {g0, g1, g2});
    const std::string at = "t " + std::to_string(c.t) + " k " + std::to_string(c.k);
    if (c.resid) {
      EXPECT_LE(rel_err(to_host_f32(gh_out), h_ref), kBf16Tol) << at;
    }
    EXPECT_LE(rel_err(to_host_f32(gx), x_ref), kBf16Tol) << at;
    EXPECT_LE(rel_err(to_host_f32(g0), r0), kBf16Tol) << at;
    EXPECT_LE(rel_err(to_host_f32(g1), r1), kBf16Tol) << at;
    EXPECT_LE(rel_err(to_host_f32(g2), r2), kBf16Tol) << at;
  }
}

TEST(CudaDense, EmbeddingGatherAndColumns) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(4);
  Tensor table = rand_bf16_values({50, 24}, rng);
  const std::vector<int32_t> ids = {3, 0, 49, 3, 17};
  Tensor ref = Tensor::empty({5, 24}, DType::kF32), got = Tensor::empty({5, 24}, DType::kBF16, Device::kCuda);
  ops::embedding(table, ids, ref);
  ops::embedding(to_gpu(table), ids, got);
  EXPECT_EQ(rel_err(to_host_f32(got), ref), 0.0);
  EXPECT_THROW(ops::embedding(to_gpu(table), {50}, Tensor::empty({1, 24}, DType::kBF16, Device::kCuda)), Error);

  Tensor rows_ref = Tensor::empty({2, 24}, DType::kF32), rows_got = Tensor::empty({2, 24}, DType::kBF16, Device::kCuda);
  ops::gather_rows(ref, {4, 1}, rows_ref);
  ops::gather_rows(got, {4, 1}, rows_got);
  EXPECT_EQ(rel_err(to_host_f32(rows_got), rows_ref), 0.0);

  Tensor cols_ref = Tensor::empty({5, 7}, DType::kF32), cols_got = Tensor::empty({5, 7}, DType::kBF16, Device::kCuda);
  ops::copy_columns(ref, 9, cols_ref);
  ops::copy_columns(got, 9, cols_got);
  EXPECT_EQ(rel_err(to_host_f32(cols_got), cols_ref), 0.0);

  std::vector<Tensor> parts_ref = {Tensor::empty({5, 4}, DType::kF32), Tensor::empty({5, 20}, DType::kF32)};
  std::vector<Tensor> parts_got = {Tensor::empty({5, 4}, DType::kF32, Device::kCuda),
                                   Tensor::empty({5, 20}, DType::kBF16, Device::kCuda)};
  ops::split_columns(ref, parts_ref);
  ops::split_columns(got, parts_got);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(rel_err(to_host_f32(parts_got[i]), parts_ref[i]), 0.0) << i;
  // All bf16, widths multiples of 8: the vector path.
  std::vector<Tensor> vec_ref = {Tensor::empty({5, 8}, DType::kF32), Tensor::empty({5, 16}, DType::kF32)};
  std::vector<Tensor> vec_got = {Tensor::empty({5, 8}, DType::kBF16, Device::kCuda),
                                 Tensor::empty({5, 16}, DType::kBF16, Device::kCuda)};
  ops::split_columns(ref, vec_ref);
  ops::split_columns(got, vec_got);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(rel_err(to_host_f32(vec_got[i]), vec_ref[i]), 0.0) << "bf16 " << i;
}

TEST(CudaDense, AddsGatesAndSiluMul) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(5);
  Tensor a = rand_bf16_values({6, 40}, rng), b = rand_bf16_values({6, 40}, rng);
  Tensor gate_full = rand_bf16_values({6, 40}, rng), gate_row = rand_bf16_values({6, 1}, rng);
  Tensor ref = Tensor::empty({6, 40}, DType::kF32), got = Tensor::empty({6, 40}, DType::kBF16, Device::kCuda);
  ops::add(a, b, ref);
  ops::add(to_gpu(a), to_gpu(b), got);
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol);
  for (const Tensor* g : {&gate_full, &gate_row}) {
    for (DType gd : {DType::kBF16, DType::kF32}) {  // an F32 element-wise gate takes the scalar path
      Tensor x = a.to(Device::kCpu), xg = to_gpu(a);
      ops::mul_sigmoid(x, *g);
      ops::mul_sigmoid(xg, to_gpu(*g, gd));
      EXPECT_LE(rel_err(to_host_f32(xg), x), kBf16Tol);
    }
  }
  Tensor y = b.to(Device::kCpu), yg = to_gpu(b);
  ops::add_sigmoid_gated(y, a, gate_row);
  ops::add_sigmoid_gated(yg, to_gpu(a), to_gpu(gate_row));
  EXPECT_LE(rel_err(to_host_f32(yg), y), kBf16Tol);
  Tensor gu = rand_bf16_values({6, 80}, rng);
  ops::silu_mul(gu, ref);
  ops::silu_mul(to_gpu(gu), got);
  EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol);
}

TEST(CudaDense, Norms) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(6);
  // Up to 256: rows of 4 to 32 lanes, several a block (37 rows: a partial last block); 2048: the
  // register-cached path; 10000: wider than the block's registers hold.
  const int64_t rows = 37;
  for (int64_t d : {16, 24, 32, 64, 128, 2048, 10000}) {
    Tensor x = rand_bf16_values({rows, d}, rng), y = rand_bf16_values({rows, d}, rng), z = rand_bf16_values({rows, d}, rng);
    Tensor w = rand_bf16_values({d}, rng, 0.1f);
    for (bool zc : {false, true}) {
      Tensor ref = Tensor::empty({rows, d}, DType::kF32), got = Tensor::empty({rows, d}, DType::kBF16, Device::kCuda);
      ops::rms_norm(x, w, 1e-6f, zc, ref);
      ops::rms_norm(to_gpu(x), to_gpu(w, DType::kF32), 1e-6f, zc, got);
      EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << d;
      // In place, bf16 weight.
      Tensor inplace = to_gpu(x);
      ops::rms_norm(inplace, to_gpu(w), 1e-6f, zc, inplace);
      EXPECT_LE(rel_err(to_host_f32(inplace), ref), kBf16Tol) << d;
    }
    Tensor h = x.to(Device::kCpu), hg = to_gpu(x);
    Tensor ref = Tensor::empty({rows, d}, DType::kF32), got = Tensor::empty({rows, d}, DType::kBF16, Device::kCuda);
    ops::add_rms_norm(h, y, w, 1e-6f, true, ref);
    ops::add_rms_norm(hg, to_gpu(y), to_gpu(w, DType::kF32), 1e-6f, true, got);
    EXPECT_LE(rel_err(to_host_f32(hg), h), kBf16Tol) << d;
    EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << d;
    ops::rms_norm_gated(x, z, w, 1e-6f, ref);
    ops::rms_norm_gated(to_gpu(x), to_gpu(z), to_gpu(w, DType::kF32), 1e-6f, got);
    EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol) << d;
  }
}

TEST(CudaDense, Rope) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(7);
  struct Case {
    int64_t head_dim;
    int rotary_dim;
    float theta;
  };
  // Partial rotary as the fixtures: 8 of 32 (qwen3_next_tiny at 1e4, qwen3_5_tiny at 1e7), 8 of
  // 16 (qwen3_5_moe_tiny) and 4 of 16 (partial_rotary_factor 0.25).
  // And rotations of 128 and 256 (two and four angles a lane in the warp kernel).
  for (const Case& c : {Case{256, 64, 1e4f}, Case{32, 8, 1e4f}, Case{32, 8, 1e7f},
                        Case{16, 8, 1e7f}, Case{16, 4, 1e7f}, Case{128, 128, 1e6f}, Case{256, 256, 1e7f}}) {
    ops::RopeSpec spec;
    spec.rotary_dim = c.rotary_dim;
    for (int i = 0; i < c.rotary_dim / 2; ++i) {
      spec.inv_freq.push_back(1.f / std::pow(c.theta, float(2 * i) / float(c.rotary_dim)));
    }
    const std::vector<int32_t> pos = {0, 1, 15, 16, 63, 64, 130, 199, 200, 777, 8191, 262143};
    Tensor x = rand_bf16_values({int64_t(pos.size()), 4, c.head_dim}, rng);
    Tensor ref = x.to(Device::kCpu), got = to_gpu(x);
    ops::rope(ref, pos, spec);
    ops::rope(got, pos, spec);
    EXPECT_LE(rel_err(to_host_f32(got), ref), kBf16Tol)
        << "rotary " << c.rotary_dim << " of " << c.head_dim << ", theta " << c.theta;
    // The fused query/key preparation (gate split, both norms, both ropes) against the CPU's
    // composition, 4 query heads over 2 kv heads.
    const int64_t t = int64_t(pos.size()), d = c.head_dim;
    Tensor qg = rand_bf16_values({t, 4, 2 * d}, rng), k = rand_bf16_values({t, 2, d}, rng);
    Tensor qw = rand_bf16_values({d}, rng, 0.1f), kw = rand_bf16_values({d}, rng, 0.1f);
    Tensor q_ref = Tensor::empty({t, 4, d}, DType::kF32), gate_ref = Tensor::empty({t, 4 * d}, DType::kF32);
    Tensor k_ref = k.to(Device::kCpu);
    ops::qk_norm_rope(qg, k_ref, qw, kw, 1e-6f, true, pos, spec, q_ref, gate_ref);
    Tensor gq = Tensor::empty({t, 4, d}, DType::kBF16, Device::kCuda), ggate = Tensor::empty({t, 4 * d}, DType::kBF16, Device::kCuda);
    Tensor gk = to_gpu(k);
    ops::qk_norm_rope(to_gpu(qg), gk, to_gpu(qw, DType::kF32), to_gpu(kw), 1e-6f, true, pos, spec, gq, ggate);
    EXPECT_LE(rel_err(to_host_f32(gq), q_ref), kBf16Tol) << "q, head dim " << d;
    EXPECT_LE(rel_err(to_host_f32(gk), k_ref), kBf16Tol) << "k, head dim " << d;
    EXPECT_LE(rel_err(to_host_f32(ggate), gate_ref), 1e-6) << "gate, head dim " << d;
  }
}

TEST(CudaDense, RandomFillMatchesCpuBitForBit) {
  STRATA_REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kBF16}) {
    Tensor c = Tensor::empty({1000, 33}, d), g = Tensor::empty({1000, 33}, d, Device::kCuda);
    ops::fill_random_uniform(c, 12345, 0.5f);
    ops::fill_random_uniform(g, 12345, 0.5f);
    Tensor back = g.to(Device::kCpu);
    EXPECT_EQ(std::memcmp(c.raw(), back.raw(), c.nbytes()), 0) << dtype_name(d);
  }
}

TEST(CudaDense, CopySlot) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(8);
  Tensor pool = rand_bf16_values({4, 3, 5}, rng), gpool = to_gpu(pool, DType::kF32);
  ops::copy_slot(pool, 1, 3);
  ops::copy_slot(gpool, 1, 3);
  EXPECT_EQ(rel_err(to_host_f32(gpool), pool), 0.0);
}

// Many pools and pairs in one call, at a production size (a 32 x 128 x 128 F32 GDN state slot,
// 2 MiB) and at a row of 15 bytes (no 16-byte alignment); more pairs than one launch takes.
TEST(CudaDense, CopySlotsMatchesCopySlotOneByOne) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(18);
  const std::vector<Shape> shapes = {{70, 32, 128, 128}, {70, 15}, {70, 3, 5}};
  std::vector<Tensor> host, gpu;
  random_byte_pools(shapes, rng, host, gpu);
  std::vector<ops::SlotCopy> copies;
  for (int i = 0; i < 33; ++i) copies.push_back({i, 35 + i});  // 99 copies over three pools
  ops::copy_slots(host, copies);
  ops::copy_slots(gpu, copies);
  for (size_t p = 0; p < shapes.size(); ++p) {
    const Tensor back = gpu[p].to(Device::kCpu);
    EXPECT_EQ(std::memcmp(back.raw(), host[p].raw(), back.nbytes()), 0) << "pool " << p;
    EXPECT_EQ(std::memcmp(static_cast<const char*>(host[p].raw()) + host[p].nbytes() / 70 * 35,
                          host[p].raw(), host[p].nbytes() / 70 * 33), 0) << "pool " << p;
  }
}

// Speculative decoding's host reads: a verify's rows (out of order, one twice) of logits the size
// of Qwen3.5's vocabulary, whole and as arg maxes (a tie across blocks, a maximum in the last
// element), equal to the CPU's; no rows read nothing.
TEST(CudaDense, RowsAndArgMaxesToHost) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(17);
  const int64_t n = 12, v = 248320;
  Tensor logits = rand_bf16_values({n, v}, rng, 3.f);
  logits.data<float>()[3 * v + 1000] = 60.f;
  logits.data<float>()[3 * v + 200000] = 60.f;  // tie: the lower index wins
  logits.data<float>()[7 * v + v - 1] = 70.f;
  const Tensor glogits = to_gpu(logits, DType::kF32);
  const std::vector<int32_t> rows{7, 3, 0, 11, 3, 5};
  std::vector<float> want, got;
  ops::rows_to_host(logits, rows, want);
  ops::rows_to_host(glogits, rows, got);
  ASSERT_EQ(want.size(), rows.size() * size_t(v));
  EXPECT_EQ(got, want);
  EXPECT_EQ(want[size_t(v) - 1], 70.f);  // row 7 first
  std::vector<int32_t> want_ids, got_ids;
  ops::argmax_rows_to_host(logits, rows, want_ids);
  ops::argmax_rows_to_host(glogits, rows, got_ids);
  EXPECT_EQ(got_ids, want_ids);
  EXPECT_EQ(want_ids[0], v - 1);
  EXPECT_EQ(want_ids[1], 1000);
  EXPECT_EQ(want_ids[4], 1000);
  ops::rows_to_host(glogits, {}, got);
  ops::argmax_rows_to_host(glogits, {}, got_ids);
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(got_ids.empty());
}

TEST(CudaDense, ArgmaxAndSampling) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int64_t n = 6, v = 5000;
  Tensor logits = rand_bf16_values({n, v}, rng, 3.f);
  logits.data<float>()[2 * v + 4321] = 50.f;
  logits.data<float>()[3 * v + 7] = 40.f;
  logits.data<float>()[3 * v + 9] = 40.f;  // tie: the lower index wins
  logits.data<float>()[4 * v + 100] = NAN;  // skipped, as on the CPU
  logits.data<float>()[5 * v] = NAN;        // at index 0 it wins on the CPU: 0 on both
  Tensor glogits = to_gpu(logits, DType::kF32);
  Tensor ids = Tensor::empty({n}, DType::kI32), gids = Tensor::empty({n}, DType::kI32, Device::kCuda);
  ops::argmax(logits, ids);
  ops::argmax(glogits, gids);
  Tensor back = gids.to(Device::kCpu);
  for (int i = 0; i < n; ++i) EXPECT_EQ(back.data<int32_t>()[i], ids.data<int32_t>()[i]) << i;
  EXPECT_EQ(ids.data<int32_t>()[3], 7);
  EXPECT_EQ(ids.data<int32_t>()[5], 0);
  {
    // A vocabulary the size of Qwen3.5's (spread over many blocks, the last one short), with a
    // tie between two blocks' maxima and a maximum in the last element.
    const int64_t big = 248320 + 7;
    Tensor wide = rand_bf16_values({3, big}, rng, 3.f);
    wide.data<float>()[5000] = 60.f;
    wide.data<float>()[200000] = 60.f;
    wide.data<float>()[2 * big - 1] = 70.f;
    Tensor wids = Tensor::empty({3}, DType::kI32), gwids = Tensor::empty({3}, DType::kI32, Device::kCuda);
    ops::argmax(wide, wids);
    ops::argmax(to_gpu(wide, DType::kF32), gwids);
    Tensor wback = gwids.to(Device::kCpu);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(wback.data<int32_t>()[i], wids.data<int32_t>()[i]) << i;
    EXPECT_EQ(wids.data<int32_t>()[0], 5000);
    EXPECT_EQ(wids.data<int32_t>()[1], big - 1);
  }
}

// The engine's sampling on the device against the CPU reference at Qwen3.5's vocabulary and
// batch 256: every parameter kind, draws sharing rows, adjustments, both log-probability modes.
// Greedy ids and top log-probability ids are equal; a sampled id may differ only where its draw
// lands within float rounding of a boundary (allowed for 1 in 100 draws); log-probabilities
// agree to 2e-4.
void sample_tokens_case(bool raw, std::mt19937& rng) {
  const int64_t v = 248320, rows = 256;
  Tensor logits = Tensor::empty({rows, v}, DType::kF32);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = 1.f + float(r % 4) * 1.5f;  // flat to peaked
    for (int64_t i = 0; i < v; ++i) logits.data<float>()[r * v + i] = nd(rng) * scale;
  }
  logits.data<float>()[3 * v + 17] = logits.data<float>()[3 * v + 90000] = 40.f;  // a greedy tie
  // Ties at the top-k cut of draws on the many-block path (kind 2): 60 equal tokens spread over
  // the row; 200 in one part (more than a part keeps: the full path); 2000 in one part.
  for (int j = 0; j < 60; ++j) logits.data<float>()[2 * v + j * 4001] = 30.f;
  for (int j = 0; j < 200; ++j) logits.data<float>()[10 * v + 100 + j] = 35.f;
  for (int j = 0; j < 2000; ++j) logits.data<float>()[18 * v + 20000 + j] = 35.f;
  Tensor glogits = to_gpu(logits, DType::kF32);
  ops::SampleBatch batch;
  batch.raw_logprobs = raw;
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (int i = 0; i < 300; ++i) {
    ops::SampleSpec s;
    s.logits_row = int32_t(i < rows ? i : (i * 7) % rows);
    const int kind = i % 8;  // 2 and 7: top-k over many blocks a row
    s.greedy = kind == 0 || kind == 1;
    s.inv_temperature = kind == 3 || kind == 7 ? 1.f / 0.7f : 1.f;
    s.top_k = kind == 2 ? 50 : kind == 5 ? 1000 : kind == 7 ? 8 : 0;
    s.top_p = kind == 2 || kind == 4 ? 0.9f : kind == 5 ? 0.5f : 1.f;
    s.min_p = kind == 6 ? 0.1f : kind == 7 ? 0.05f : 0.f;
    s.num_top_logprobs = kind == 1 || kind == 7 ? 20 : kind == 2 ? 5 : kind == 4 ? 0 : -1;
    s.uniform = u(rng) * 0.9999f;
    if (kind == 1 || kind == 5 || kind == 7) {  // penalties, bias and masks on 300 ids
      s.repetition_penalty = 1.2f;
      s.adjust_begin = int32_t(batch.adjust.size());
      for (int j = 0; j < 300; ++j) {
        ops::LogitAdjust a;
        a.id = int32_t(j * 811 % v);
        a.bias = j % 5 == 0 ? 3.f : 0.f;
        a.mask = j % 17 == 0;
        a.repeat = j % 2;
        a.subtract = j % 3 == 0 ? 0.7f : 0.f;
        batch.adjust.push_back(a);
      }
      s.adjust_count = 300;
    }
    batch.rows.push_back(s);
  }
  ops::SampledTokens want, got;
  ops::sample_tokens(logits, batch, want);
  ops::sample_tokens(glogits, batch, got);
  int differ = 0, sampled = 0;
  double max_lp = 0;
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const ops::SampleSpec& s = batch.rows[i];
    if (s.greedy) {
      EXPECT_EQ(got.ids[i], want.ids[i]) << "greedy draw " << i;
    } else {
      ++sampled;
      differ += got.ids[i] != want.ids[i];
    }
    ASSERT_GE(got.ids[i], 0);
    ASSERT_LT(got.ids[i], v);
    if (s.num_top_logprobs < 0) continue;
    if (got.ids[i] == want.ids[i]) max_lp = std::max(max_lp, double(std::fabs(got.logprobs[i] - want.logprobs[i])));
    for (int k = 0; k < s.num_top_logprobs; ++k) {
      const size_t at = i * ops::kMaxTopLogprobs + size_t(k);
      EXPECT_EQ(got.top_ids[at], want.top_ids[at]) << "draw " << i << " top " << k;
      max_lp = std::max(max_lp, double(std::fabs(got.top_logprobs[at] - want.top_logprobs[at])));
    }
  }
  std::printf("sample_tokens (raw %d): %d of %d sampled ids differ, max |d logprob| %.3g\n", int(raw), differ,
              sampled, max_lp);
  EXPECT_LE(differ, sampled / 100);
  EXPECT_LE(max_lp, 2e-4);
#if defined(STRATA_WITH_CUDA)
  // Time per call (the host's part and its wait for the copy back included) at batch 256 and 1:
  // greedy arg max, and temperature 1 / top-k 50 / top-p 0.9.
  auto time_batch = [&](const ops::SampleBatch& b) {
    ops::SampledTokens out;
    ops::sample_tokens(glogits, b, out);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, ops::cuda::stream());
    for (int k = 0; k < 10; ++k) ops::sample_tokens(glogits, b, out);
    cudaEventRecord(e1, ops::cuda::stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms / 10;
  };
  if (!raw) {
    ops::SampleBatch g, t;
    for (int64_t r = 0; r < rows; ++r) {
      ops::SampleSpec s;
      s.logits_row = int32_t(r == 2 || r == 10 || r == 18 ? r + 4 : r);  // not the rows of many ties
      g.rows.push_back(s);
      s.greedy = false;
      s.top_k = 50;
      s.top_p = 0.9f;
      s.uniform = 0.5f;
      t.rows.push_back(s);
    }
    std::printf("sample_tokens at batch 256, vocab %lld: greedy %.3f ms, temperature 1 / top-k 50 / top-p 0.9 "
                "%.3f ms\n", (long long)v, time_batch(g), time_batch(t));
    g.rows.resize(1);
    t.rows.resize(1);
    std::printf("sample_tokens at batch 1: greedy %.3f ms, temperature 1 / top-k 50 / top-p 0.9 %.3f ms\n",
                time_batch(g), time_batch(t));
  }
#endif
}

TEST(CudaDense, SampleTokensMatchesTheCpuAtProductionShapes) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(10);
  sample_tokens_case(false, rng);
  sample_tokens_case(true, rng);
}

}  // namespace
}  // namespace strata::testing
