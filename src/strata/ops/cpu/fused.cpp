// CPU reference for the fused ops (ops.h, "forward scope, fused ops"): each is the composition
// of the plain ops it replaces, so the CPU path computes exactly what it computed before.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "strata/core/parallel.h"
#include "strata/ops/cpu/check.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// The widths of outs, checked to tile the columns of x.
void check_split(const Tensor& x, const std::vector<Tensor>& outs, const char* op) {
  STRATA_CHECK(!outs.empty() && x.ndim() >= 1, op, ": no outputs for ", x.describe());
  const int64_t t = rows_of(x);
  int64_t cols = 0;
  for (const Tensor& o : outs) {
    STRATA_CHECK(o.ndim() >= 1 && rows_of(o) == t, op, ": output ", o.describe(),
                 " does not have the ", t, " rows of ", x.describe());
    cols += o.dim(-1);
  }
  STRATA_CHECK(cols == x.dim(-1), op, ": outputs cover ", cols, " of ", x.dim(-1), " columns");
}

// Rows `rows` of x (rows first) as a new CPU tensor (gather_rows over its [rows, -1] view);
// put_rows writes them back.
Tensor take_rows(const Tensor& x, const std::vector<int32_t>& rows) {
  Shape shape = x.shape();
  shape[0] = int64_t(rows.size());
  Tensor out = Tensor::empty(shape, x.dtype());
  gather_rows(x.reshape({x.dim(0), -1}), rows, out.reshape({int64_t(rows.size()), -1}));
  return out;
}

void put_rows(const Tensor& src, const std::vector<int32_t>& rows, const Tensor& dst) {
  const size_t row_bytes = dst.nbytes() / size_t(dst.dim(0));
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(static_cast<char*>(dst.raw()) + size_t(rows[i]) * row_bytes,
                static_cast<const char*>(src.raw()) + i * row_bytes, row_bytes);
  }
}

// gdn_decode_step with per-token states (batch.state_steps): the same composition a token at a
// time, token j of every sequence that has one, and after it the recurrent and conv states of
// each sequence with a later token copied to its step slot (j < count). The CPU ops give the
// same numbers whatever the split of a sequence into steps, so the outputs and final states
// equal the whole batch's at once.
void gdn_step_by_token(const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                       const Tensor& conv_w, const Tensor& conv_state, const Tensor& a_log,
                       const Tensor& dt_bias, const Tensor& state, const Tensor& norm_w, float eps,
                       const ForwardBatch& batch, const Tensor& out) {
  int32_t longest = 0;
  for (const SeqInBatch& s : batch.seqs) longest = std::max(longest, s.q_len);
  for (int32_t j = 0; j < longest; ++j) {
    ForwardBatch one;
    std::vector<int32_t> rows;
    std::vector<SlotCopy> steps;
    for (const SeqInBatch& s : batch.seqs) {
      if (s.q_len <= j) continue;
      SeqInBatch o = s;
      o.q_start = one.num_tokens();
      o.q_len = 1;
      o.ctx_len = s.ctx_len + j;
      one.seqs.push_back(o);
      const int64_t row = s.q_start + j;
      rows.push_back(int32_t(row));
      one.token_ids.push_back(batch.token_ids[size_t(row)]);
      one.positions.push_back(batch.positions[size_t(row)]);
      if (s.state_slot >= 0 && j + 1 < s.q_len && j < batch.state_steps.count) {
        steps.push_back({s.state_slot, batch.state_steps.first + s.state_slot * batch.state_steps.count + j});
      }
    }
    const Tensor o = take_rows(out, rows);
    gdn_decode_step(take_rows(qkv, rows), take_rows(z, rows), take_rows(a, rows), take_rows(b, rows), conv_w,
                    conv_state, a_log, dt_bias, state, norm_w, eps, one, o);
    put_rows(o, rows, out);
    copy_slots({state, conv_state}, steps);
  }
}

}  // namespace

ForwardScope::ForwardScope(Device device, const ForwardBatch& batch) : device_(device) {
#if defined(STRATA_WITH_CUDA)
  if (device_ == Device::kCuda) cuda::begin_forward(batch);
#else
  (void)batch;
#endif
}

ForwardScope::~ForwardScope() {
#if defined(STRATA_WITH_CUDA)
  if (device_ == Device::kCuda) cuda::end_forward();
#endif
}

void add_rms_norm(const Tensor& h, const Tensor& y, const Tensor& w, float eps, bool zero_centered,
                  const Tensor& out) {
  STRATA_CUDA_DISPATCH(h, add_rms_norm(h, y, w, eps, zero_centered, out));
  add(h, y, h);
  rms_norm(h, w, eps, zero_centered, out);
}

void split_columns(const Tensor& x, const std::vector<Tensor>& outs) {
  STRATA_CUDA_DISPATCH(x, split_columns(x, outs));
  expect_cpu_f32(x, "split_columns", "x");
  check_split(x, outs, "split_columns");
  int64_t col = 0;
  for (const Tensor& o : outs) {
    copy_columns(x, col, o);
    col += o.dim(-1);
  }
}

void add_rms_norm_linear(const Tensor& h, const Tensor& y, const Tensor& norm_w, float eps,
                         bool zero_centered, const Tensor& h_out, const Tensor& x,
                         const Tensor& weight, const std::vector<Tensor>& outs, const Tensor& weight_rest) {
  STRATA_CUDA_DISPATCH(h, add_rms_norm_linear(h, y, norm_w, eps, zero_centered, h_out, x, weight, outs, weight_rest));
  if (y.defined()) {
    add(h, y, h_out);
    rms_norm(h_out, norm_w, eps, zero_centered, x);
  } else {
    rms_norm(h, norm_w, eps, zero_centered, x);
  }
  linear_split(x, weight, outs, weight_rest);
}

void linear_split(const Tensor& x, const Tensor& w, const std::vector<Tensor>& outs, const Tensor& w_rest) {
  STRATA_CUDA_DISPATCH(x, linear_split(x, w, outs, w_rest));
  expect_cpu_f32(x, "linear_split", "x");
  STRATA_CHECK(!w_rest.defined(), "linear_split: rows of another dtype after the weight (", w_rest.describe(),
               ") are for CUDA's FP8 projections; on the CPU a projection is one F32 weight");
  Tensor all = Tensor::empty({rows_of(x), w.dim(0)}, DType::kF32);
  check_split(all, outs, "linear_split");
  linear(x, w, all);
  split_columns(all, outs);
}

void add_sigmoid_gated(const Tensor& y, const Tensor& x, const Tensor& gate) {
  STRATA_CUDA_DISPATCH(y, add_sigmoid_gated(y, x, gate));
  expect_cpu_f32(y, "add_sigmoid_gated", "y");
  expect_cpu_f32(x, "add_sigmoid_gated", "x");
  expect_cpu_f32(gate, "add_sigmoid_gated", "gate");
  const int64_t rows = rows_of(x), d = x.ndim() ? x.dim(-1) : 0;
  STRATA_CHECK(y.numel() == x.numel() && gate.numel() == rows, "add_sigmoid_gated: y ",
               y.describe(), ", x ", x.describe(), ", gate ", gate.describe());
  for (int64_t r = 0; r < rows; ++r) {
    const float s = sigmoid(gate.data<float>()[r]);
    for (int64_t i = 0; i < d; ++i) y.data<float>()[r * d + i] += x.data<float>()[r * d + i] * s;
  }
}

void gdn_decode_step(const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b,
                     const Tensor& conv_w, const Tensor& conv_state, const Tensor& a_log,
                     const Tensor& dt_bias, const Tensor& state, const Tensor& norm_w, float eps,
                     const ForwardBatch& batch, const Tensor& out) {
  STRATA_CUDA_DISPATCH(qkv, gdn_decode_step(qkv, z, a, b, conv_w, conv_state, a_log, dt_bias,
                                            state, norm_w, eps, batch, out));
  expect_cpu_f32(qkv, "gdn_decode_step", "qkv");
  STRATA_CHECK(out.ndim() == 3 && state.ndim() == 4 && qkv.ndim() == 2, "gdn_decode_step: out ",
               out.describe(), ", state ", state.describe(), ", qkv ", qkv.describe());
  // The composition takes any q_len; the bound is the fused kernels', so that every device
  // takes the same batches.
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const int32_t q_len = batch.seqs[i].q_len;
    STRATA_CHECK(q_len >= 1 && q_len <= kGdnStepMaxTokens, "gdn_decode_step: sequence ", i,
                 " has ", q_len, " new tokens (1 to ", kGdnStepMaxTokens, ")");
  }
  if (batch.state_steps.count > 0) {
    gdn_step_by_token(qkv, z, a, b, conv_w, conv_state, a_log, dt_bias, state, norm_w, eps, batch, out);
    return;
  }
  const int64_t t = qkv.dim(0), conv_dim = qkv.dim(1), hv = out.dim(1), dv = out.dim(2);
  const int64_t dk = state.dim(2);
  const int64_t qk_cols = conv_dim - hv * dv;
  STRATA_CHECK(qk_cols > 0 && qk_cols % (2 * dk) == 0, "gdn_decode_step: qkv ", qkv.describe(),
               " does not hold q, k of width ", dk, " and v ", hv, "x", dv);
  const int64_t hk = qk_cols / (2 * dk);
  Tensor mixed = Tensor::empty({t, conv_dim}, DType::kF32);
  causal_conv1d(qkv, conv_w, conv_state, batch, mixed);
  Tensor q = Tensor::empty({t, hk, dk}, DType::kF32), k = Tensor::empty({t, hk, dk}, DType::kF32);
  Tensor v = Tensor::empty({t, hv, dv}, DType::kF32);
  split_columns(mixed, {q.reshape({t, hk * dk}), k.reshape({t, hk * dk}), v.reshape({t, hv * dv})});
  Tensor g = Tensor::empty({t, hv}, DType::kF32), beta = Tensor::empty({t, hv}, DType::kF32);
  gdn_gates(a, b, a_log, dt_bias, g, beta);
  Tensor core = Tensor::empty({t, hv, dv}, DType::kF32);
  gated_delta_rule(q, k, v, g, beta, state, batch, core, GdnAlgorithm::kRecurrent);
  rms_norm_gated(core, z, norm_w, eps, out);
}

void fill_random_uniform(const Tensor& t, uint64_t seed, float scale) {
  STRATA_CUDA_DISPATCH(t, fill_random_uniform(t, seed, scale));
  STRATA_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF8E4M3,
               "fill_random_uniform: F32, BF16 or F8_E4M3 tensor expected, got ", t.describe());
  const int64_t n = t.numel();
  parallel_for((n + 4095) / 4096, [&](int64_t blk) {
    for (int64_t i = blk * 4096; i < std::min(n, (blk + 1) * 4096); ++i) {
      const float v = random_uniform_value(seed, uint64_t(i), scale);
      if (t.dtype() == DType::kF32) {
        t.data<float>()[i] = v;
      } else if (t.dtype() == DType::kBF16) {
        t.data<uint16_t>()[i] = f32_to_bf16(v);
      } else {
        t.data<uint8_t>()[i] = f32_to_f8e4m3(v);
      }
    }
  });
}

}  // namespace strata::ops
