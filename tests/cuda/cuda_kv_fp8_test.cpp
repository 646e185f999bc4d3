// CUDA attention over an FP8 KV cache (--kv-cache-dtype fp8) against the CPU op: the pages the
// GPU writes (codes and scale bytes) equal the CPU's byte for byte, and the outputs agree within
// the bf16 bound, in decode (split-K, the graphs' path) and prefill (chunks after cached pages,
// the pages decoded to bf16 scratch), at Qwen3.5's shape (16 query heads over 2 kv heads of 256)
// and at head dims 128 and 64; and the Qwen3.5 fixtures with FP8 KV on CUDA against the CPU with
// FP8 KV, in every mode, within the goldens' bf16 bounds.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../golden/golden_util.h"
#include "../unit/batch_test_util.h"
#include "cuda_test_util.h"
#include "strata/engine/single_sequence.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

bool same_bytes(const Tensor& gpu, const Tensor& cpu) {
  const Tensor h = gpu.to(Device::kCpu);
  return h.nbytes() == cpu.nbytes() && std::memcmp(h.raw(), cpu.raw(), cpu.nbytes()) == 0;
}

// Random valid cached entries (codes that are not NaN, scales 2^-4 .. 2^3) in every row; NaN codes
// in the rows past each sequence's end, which no kernel may let into an output.
void fill_pages(ops::PagedKv& c, const ForwardBatch& batch, std::mt19937& rng) {
  const int64_t bs = c.k.dim(1), hkv = c.k.dim(2), d = c.k.dim(3);
  for (Tensor* t : {&c.k, &c.v}) {
    for (int64_t i = 0; i < t->numel(); ++i) {
      uint8_t b = uint8_t(rng());
      if ((b & 0x7f) == 0x7f) b &= 0xfe;
      t->data<uint8_t>()[i] = b;
    }
  }
  for (Tensor* t : {&c.k_scale, &c.v_scale}) {
    for (int64_t i = 0; i < t->numel(); ++i) t->data<uint8_t>()[i] = uint8_t(123 + rng() % 8);
  }
  for (const SeqInBatch& sq : batch.seqs) {
    for (int64_t p = sq.ctx_len + sq.q_len; p < int64_t(sq.block_table.size()) * bs; ++p) {
      const int64_t row = int64_t(sq.block_table[size_t(p / bs)]) * bs + p % bs;
      std::memset(c.k.data<uint8_t>() + row * hkv * d, 0x7f, size_t(hkv * d));
      std::memset(c.v.data<uint8_t>() + row * hkv * d, 0x7f, size_t(hkv * d));
    }
  }
}

void check_fp8_attention(int64_t d, int64_t hq, int64_t hkv, const std::vector<int32_t>& q_lens,
                         const std::vector<int32_t>& ctx, int bs = 16) {
  std::mt19937 rng(int(d) * 13 + int(hq) + int(q_lens.size()) * 101 + ctx[0]);
  int blocks = 0;
  const ForwardBatch batch = make_batch(q_lens, ctx, bs, &blocks);
  const int64_t t = batch.num_tokens();
  std::string at = "head dim " + std::to_string(d) + ", " + std::to_string(hq) + "/" + std::to_string(hkv) +
                   " heads, q_lens";
  for (int32_t q : q_lens) at += " " + std::to_string(q);
  at += ", ctx";
  for (int32_t c : ctx) at += " " + std::to_string(c);
  ops::PagedKv cpu{Tensor::empty({blocks, bs, hkv, d}, DType::kF8E4M3), Tensor::empty({blocks, bs, hkv, d}, DType::kF8E4M3),
                   Tensor::empty({blocks, bs, hkv}, DType::kUE8M0), Tensor::empty({blocks, bs, hkv}, DType::kUE8M0)};
  fill_pages(cpu, batch, rng);
  ops::PagedKv gpu{cpu.k.to(Device::kCuda), cpu.v.to(Device::kCuda), cpu.k_scale.to(Device::kCuda),
                   cpu.v_scale.to(Device::kCuda)};
  // Keys of norm-scaled size (as after q/k RMSNorm) and small values, as in the models.
  Tensor q = rand_bf16_values({t, hq, d}, rng, 0.5f), k = rand_bf16_values({t, hkv, d}, rng, 2.f),
         v = rand_bf16_values({t, hkv, d}, rng, 0.1f), gate = rand_bf16_values({t, hq * d}, rng, 2.f);
  const float scale = 1.f / std::sqrt(float(d));
  Tensor ref = Tensor::empty({t, hq, d}, DType::kF32), got = Tensor::empty({t, hq, d}, DType::kBF16, Device::kCuda);
  ops::paged_attention_gated(q, k, v, cpu, batch, scale, gate, ref);
  ops::paged_attention_gated(to_gpu(q), to_gpu(k), to_gpu(v), gpu, batch, scale, to_gpu(gate), got);
  const double err = rel_err(to_host_f32(got), ref);
  std::printf("  %s: rel err %.3g\n", at.c_str(), err);
  EXPECT_LE(err, kBf16Tol) << at;
  EXPECT_TRUE(same_bytes(gpu.k, cpu.k)) << "k codes, " << at;
  EXPECT_TRUE(same_bytes(gpu.v, cpu.v)) << "v codes, " << at;
  EXPECT_TRUE(same_bytes(gpu.k_scale, cpu.k_scale)) << "k scales, " << at;
  EXPECT_TRUE(same_bytes(gpu.v_scale, cpu.v_scale)) << "v scales, " << at;
}

TEST(CudaKvFp8, DecodeMatchesCpu) {
  STRATA_REQUIRE_GPU();
  check_fp8_attention(256, 16, 2, {1, 1, 1}, {0, 5, 40});   // split-K, a new page
  check_fp8_attention(256, 16, 2, {1, 1}, {4500, 17});      // the split cap
  check_fp8_attention(128, 8, 2, {1, 1, 1}, {63, 200, 1000});
  check_fp8_attention(64, 4, 1, {1, 1}, {31, 300});
}

TEST(CudaKvFp8, PrefillMatchesCpu) {
  STRATA_REQUIRE_GPU();
  check_fp8_attention(256, 16, 2, {2048, 700}, {0, 1000});   // Qwen3.5: wgmma, two heads a block
  check_fp8_attention(256, 16, 2, {1, 63, 65, 300}, {0, 17, 100, 1000});
  check_fp8_attention(128, 8, 2, {300, 129}, {0, 70}, 32);
  check_fp8_attention(64, 4, 1, {100, 64, 3}, {37, 80, 150});  // the WMMA prefill
  check_fp8_attention(256, 16, 2, {5, 3}, {0, 0}, 1);          // a page a token
}

TEST(CudaKvFp8, RefusesMissingScales) {
  STRATA_REQUIRE_GPU();
  int blocks = 0;
  const ForwardBatch batch = make_batch({3}, {0}, 16, &blocks);
  ops::PagedKv c{Tensor::zeros({blocks, 16, 1, 64}, DType::kF8E4M3, Device::kCuda),
                 Tensor::zeros({blocks, 16, 1, 64}, DType::kF8E4M3, Device::kCuda), {}, {}};
  std::mt19937 rng(3);
  Tensor q = to_gpu(rand_bf16_values({3, 2, 64}, rng)), k = to_gpu(rand_bf16_values({3, 1, 64}, rng));
  Tensor out = Tensor::empty({3, 2, 64}, DType::kBF16, Device::kCuda);
  EXPECT_THROW(ops::paged_attention(q, k, k, c, batch, 0.125f, out), Error);
}

// The goldens' bounds (cuda_golden_test.cpp), in units of the HF reference's scale.
TEST(CudaKvFp8, FixtureLogitsMatchCpuInEveryMode) {
  STRATA_REQUIRE_GPU();
  for (const char* name : {"qwen3_5_tiny", "qwen3_next_tiny", "qwen3_5_moe_tiny"}) {
    const Fixture f = load_fixture(name);
    LoadOptions o;
    o.kv_cache_dtype = KvCacheDtype::kFp8E4M3;
    auto cpu = load_model(f.dir, o);
    o.device = Device::kCuda;
    auto gpu = load_model(f.dir, o);
    const double scale = reference_scale(f.logits);
    for (const std::string mode : {"full", "stepwise", "chunked:7", "chunked:64"}) {
      const ErrorProfile e = error_profile(sequence_logits(*gpu, f.prompt, mode), sequence_logits(*cpu, f.prompt, mode));
      std::printf("  cuda %s fp8 KV %-10s against the CPU's: max|d| %.4g, rms %.4g, median per-position max %.4g "
                  "(scale %.4g)\n", name, mode.c_str(), e.max, e.rms, e.median_position_max, scale);
      EXPECT_LE(e.max, 3.0 * scale) << name << " " << mode;
      EXPECT_LE(e.rms, 0.12 * scale) << name << " " << mode;
      EXPECT_LE(e.median_position_max, 0.1 * scale) << name << " " << mode;
    }
  }
}

}  // namespace
}  // namespace strata::testing
