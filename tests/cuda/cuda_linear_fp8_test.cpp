// linear over FP8 block-scale weights on the GPU (an FP8 checkpoint's dense projections kept
// compressed: F8_E4M3 codes with per-row scales per 128 columns, Tensor::with_scale), with the
// bf16 rows a fused projection may end in: the decode GEMV (W8A16, up to 8 rows, also with the
// norm prologue of add_rms_norm_linear) against the CPU op on the dequantised weights, and the
// GEMM for more rows (W8A8: x quantised per row and per 128 columns by quantize_fp8_rows, then
// cuBLASLt's block-scaled FP8 GEMM; the last rows short of a multiple of four through the GEMV)
// against that composition on the CPU. At the Qwen3.5-35B-A3B projections (GDN in_proj with its
// bf16 b and a rows, out_proj, attention qkv) and at edges: K of 64 (a partial scale group), row
// counts that are not multiples of four.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace strata::testing {
namespace {

// Random F8 codes [n, k] with random per-row scales (the last group partial when k is not a
// multiple of 128), on the CPU: values up to about `range`.
Tensor random_fp8_matrix(int64_t n, int64_t k, std::mt19937& rng, float range) {
  Tensor codes = Tensor::empty({n, k}, DType::kF8E4M3);
  ops::fill_random_uniform(codes, rng(), 448.f);
  Tensor scale = Tensor::empty({n, (k + 127) / 128}, DType::kF32);
  std::uniform_real_distribution<float> u(0.25f, 1.f);
  for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = u(rng) * range / 448.f;
  return codes.with_scale(scale, 128);
}

// A projection: FP8 rows, then bf16 rows, split into outputs of these widths.
struct Projection {
  const char* name;
  int64_t k;
  std::vector<int64_t> fp8_widths, rest_widths;
};

const std::vector<Projection> kProjections = {
    {"in_proj 12288+64 x 2048", 2048, {8192, 4096}, {32, 32}},
    {"out_proj 2048 x 4096", 4096, {2048}, {}},
    {"qkv 9216 x 2048", 2048, {8192, 512, 512}, {}},
    {"tiny 256+4 x 256", 256, {192, 64}, {2, 2}},
    {"partial group 256 x 64", 64, {256}, {}},
    // An FP8 row count cuBLASLt refuses (not a multiple of 8): the GEMM rows take the codes
    // dequantised to bf16.
    {"odd 4097+3 x 1024", 1024, {4097}, {3}},
};

struct Weights {
  Tensor fp8, rest, all;  // CPU: codes with scales, bf16 values as F32, both dequantised as F32 rows
};

Weights make_weights(const Projection& p, std::mt19937& rng) {
  int64_t n_fp8 = 0, n_rest = 0;
  for (int64_t w : p.fp8_widths) n_fp8 += w;
  for (int64_t w : p.rest_widths) n_rest += w;
  Weights w;
  w.fp8 = random_fp8_matrix(n_fp8, p.k, rng, 0.05f);
  if (n_rest) w.rest = rand_bf16_values({n_rest, p.k}, rng, 0.02f);
  w.all = Tensor::empty({n_fp8 + n_rest, p.k}, DType::kF32);
  std::memcpy(w.all.raw(), w.fp8.to_f32().raw(), size_t(n_fp8 * p.k) * sizeof(float));
  if (n_rest) std::memcpy(w.all.data<float>() + n_fp8 * p.k, w.rest.raw(), size_t(n_rest * p.k) * sizeof(float));
  return w;
}

std::vector<int64_t> widths_of(const Projection& p) {
  std::vector<int64_t> all = p.fp8_widths;
  all.insert(all.end(), p.rest_widths.begin(), p.rest_widths.end());
  return all;
}

// The outputs as one [rows, n] F32 CPU tensor.
Tensor joined(const std::vector<Tensor>& outs, int64_t rows) {
  int64_t n = 0;
  for (const Tensor& o : outs) n += o.dim(-1);
  Tensor all = Tensor::empty({rows, n}, DType::kF32);
  int64_t c0 = 0;
  for (const Tensor& o : outs) {
    const Tensor h = to_host_f32(o);
    const int64_t w = o.dim(-1);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(all.data<float>() + r * n + c0, h.data<float>() + r * w, size_t(w) * sizeof(float));
    }
    c0 += w;
  }
  return all;
}

// The GPU outputs of linear_split (the first output F32, the others bf16 with `bf16_outs`).
std::vector<Tensor> gpu_outs(const Projection& p, int64_t rows, bool bf16_outs) {
  std::vector<Tensor> outs;
  for (int64_t w : widths_of(p)) {
    outs.push_back(Tensor::empty({rows, w}, outs.empty() || !bf16_outs ? DType::kF32 : DType::kBF16, Device::kCuda));
  }
  return outs;
}

// The CPU reference: x · all^T.
Tensor cpu_linear(const Tensor& x, const Tensor& all) {
  Tensor y = Tensor::empty({x.dim(0), all.dim(0)}, DType::kF32);
  ops::linear(x, all, y);
  return y;
}

// Up to 8 rows: the GEMV reads the codes (W8A16); x exact, so only f32 summation order (F32
// outputs) and the bf16 outputs' rounding separate it from the CPU op on the dequantised weights.
TEST(CudaLinearFp8, GemvMatchesTheCpuOpOnTheDequantisedWeights) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(71);
  for (const Projection& p : kProjections) {
    const Weights w = make_weights(p, rng);
    const Tensor gw = w.fp8.to(Device::kCuda), grest = w.rest.defined() ? to_gpu(w.rest) : Tensor();
    for (int64_t rows : {1, 2, 3, 5, 8}) {
      const Tensor x = rand_bf16_values({rows, p.k}, rng);
      const Tensor ref = cpu_linear(x, w.all);
      for (bool bf16_outs : {false, true}) {
        std::vector<Tensor> outs = gpu_outs(p, rows, bf16_outs);
        ops::linear_split(to_gpu(x), gw, outs, grest);
        expect_close(joined(outs, rows), ref, bf16_outs ? 8e-3 : 1e-5,
                     std::string(p.name) + " gemv rows " + std::to_string(rows) + (bf16_outs ? " bf16" : " f32"));
      }
    }
  }
}

// add_rms_norm_linear's fused GEMV with an FP8 weight: the norm prologue's x (rounded to bf16, as
// the op defines) times the codes, against the CPU op with the dequantised weights.
TEST(CudaLinearFp8, NormFusedGemvMatchesTheCpuOp) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(72);
  for (const Projection& p : {kProjections[0], kProjections[2], kProjections[3], kProjections[5]}) {
    const Weights w = make_weights(p, rng);
    const Tensor gw = w.fp8.to(Device::kCuda), grest = w.rest.defined() ? to_gpu(w.rest) : Tensor();
    for (int64_t rows : {1, 4, 8}) {
      const Tensor h = rand_bf16_values({rows, p.k}, rng), y = rand_bf16_values({rows, p.k}, rng, 0.5f);
      const Tensor nw = rand_bf16_values({p.k}, rng, 0.1f);
      Tensor h_out = Tensor::empty({rows, p.k}, DType::kF32), x = Tensor::empty({rows, p.k}, DType::kF32);
      Tensor ref = Tensor::empty({rows, w.all.dim(0)}, DType::kF32);
      ops::add_rms_norm_linear(h, y, nw, 1e-6f, true, h_out, x, w.all, {ref});
      std::vector<Tensor> outs = gpu_outs(p, rows, false);
      Tensor gh_out = Tensor::empty({rows, p.k}, DType::kBF16, Device::kCuda);
      Tensor gx = Tensor::empty({rows, p.k}, DType::kBF16, Device::kCuda);
      ops::add_rms_norm_linear(to_gpu(h), to_gpu(y), to_gpu(nw, DType::kF32), 1e-6f, true, gh_out, gx, gw, outs,
                               grest);
      expect_close(joined(outs, rows), ref, kBf16Tol, std::string(p.name) + " norm gemv rows " + std::to_string(rows));
    }
  }
}

// max |got - ref| / max |ref| over the columns [c0, c1) of rows [r0, r1).
double block_err(const Tensor& got, const Tensor& ref, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t n = ref.dim(1);
  double m = 0, scale = 1e-30;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const double g = got.data<float>()[r * n + c], e = ref.data<float>()[r * n + c];
      scale = std::max(scale, std::fabs(e));
      m = std::max(m, std::isnan(g) ? INFINITY : std::fabs(g - e));
    }
  }
  return m / scale;
}

// More rows: the FP8 rows' outputs are the W8A8 composition on the rows in fours (x quantised
// by the CPU op, dequantised, times the dequantised weights) and W8A16 on the last 1-3 rows; the
// bf16 rows' outputs are the bf16 GEMM's. The composition's own error (cuBLASLt's FP8
// accumulation, promoted per 128 of K, and the order of sums) must be far below the
// quantisation's (e4m3 keeps 4 significant bits of x: about 2^-5 relative a value), which the
// unquantised reference shows: a GEMM that skipped x's quantisation (or read the bf16 x) would
// sit at the composition's distance from the unquantised result, not at a quarter of it.
TEST(CudaLinearFp8, GemmIsTheW8A8Composition) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(73);
  for (const Projection& p : kProjections) {
    const Weights w = make_weights(p, rng);
    const Tensor gw = w.fp8.to(Device::kCuda), grest = w.rest.defined() ? to_gpu(w.rest) : Tensor();
    const int64_t n_fp8 = w.fp8.dim(0), n = w.all.dim(0);
    std::vector<int64_t> row_counts = {9, 12, 67, 256};
    if (p.k == 2048 && !p.rest_widths.empty()) row_counts.push_back(2050);  // production prefill, 2 rows over
    for (int64_t rows : row_counts) {
      const int64_t m = rows & ~int64_t(3);
      const Tensor x = rand_bf16_values({rows, p.k}, rng);
      // x's rows in fours quantised as the GPU quantises them (the CPU op, bit for bit the same).
      Tensor xq = Tensor::empty({rows, p.k}, DType::kF32);
      std::memcpy(xq.raw(), x.raw(), x.nbytes());
      {
        Tensor head = Tensor::empty({m, p.k}, DType::kF32);
        std::memcpy(head.raw(), x.raw(), size_t(m * p.k) * sizeof(float));
        Tensor q = Tensor::empty({m, p.k}, DType::kF8E4M3).with_scale(
            Tensor::empty({m, (p.k + 127) / 128}, DType::kF32), 128);
        ops::quantize_fp8_rows(head, q);
        std::memcpy(xq.raw(), q.to_f32().raw(), size_t(m * p.k) * sizeof(float));
      }
      const Tensor ref_q = cpu_linear(xq, w.all), ref_x = cpu_linear(x, w.all);
      std::vector<Tensor> outs = gpu_outs(p, rows, false);
      ops::linear_split(to_gpu(x), gw, outs, grest);
      const Tensor got = joined(outs, rows);
      const std::string what = std::string(p.name) + " gemm rows " + std::to_string(rows);
      if (n_fp8 % 8 != 0) {
        // cuBLASLt takes FP8 weight rows in eights: the rows in fours take the codes dequantised to
        // bf16 (code times scale, rounded) with x in bf16.
        Tensor wb = Tensor::empty(w.all.shape(), DType::kF32);
        for (int64_t i = 0; i < wb.numel(); ++i) wb.data<float>()[i] = bf16_to_f32(f32_to_bf16(w.all.data<float>()[i]));
        const double err = block_err(got, cpu_linear(x, wb), 0, m, 0, n_fp8);
        std::printf("  cuda %-50s dequantised rows: err %.3g\n", what.c_str(), err);
        EXPECT_LE(err, 1e-5) << what << " (dequantised fallback)";
      } else {
        const double comp = block_err(got, ref_q, 0, m, 0, n_fp8), gap = block_err(got, ref_x, 0, m, 0, n_fp8);
        std::printf("  cuda %-50s W8A8 rows: err %.3g against the composition, %.3g against unquantised x\n",
                    what.c_str(), comp, gap);
        EXPECT_LE(comp, 5e-3) << what;
        EXPECT_LE(comp, 0.25 * gap) << what;
      }
      if (m < rows) EXPECT_LE(block_err(got, ref_x, m, rows, 0, n_fp8), 1e-5) << what << " (W8A16 rows)";
      if (n > n_fp8) EXPECT_LE(block_err(got, ref_x, 0, rows, n_fp8, n), 1e-5) << what << " (bf16 rows)";
    }
  }
}

}  // namespace
}  // namespace strata::testing
