// CUDA: the Gated DeltaNet pieces. Causal depthwise conv1d (any span, plus the conv-state
// update), the gates, the token-by-token recurrence (one block per sequence and value head,
// each thread holding one column of the state in registers), and the fused step (conv + gates +
// l2 norms + recurrence + gated RMSNorm in one kernel) that decode and short speculative verify
// spans run.
// The chunked prefill form lives in gdn_chunked.cu.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/gdn_internal.h"

namespace strata::ops::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxConvHistory = 8;

__global__ void conv1d_kernel(const void* x, bool x32, const void* w, bool w32, const void* cs, bool cs32,
                              DeviceBatch b, void* out, bool o32, int64_t c_dim, int kw) {
  pdl_begin();
  const int t = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= c_dim) return;
  const int s = b.token_seq[t], qs = b.q_start[s], slot = b.slot[s];
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  const int i = t - qs, hist = kw - 1;
  float acc = 0.f;
  for (int j = 0; j < kw; ++j) {
    const int src = i + j - hist;
    float v = 0.f;
    if (src >= 0) {
      v = ldf(x, x32, int64_t(qs + src) * c_dim + c);
    } else if (has_state) {
      v = ldf(cs, cs32, (int64_t(slot) * hist + hist + src) * c_dim + c);
    }
    acc += ldf(w, w32, c * kw + j) * v;
  }
  stf(out, o32, int64_t(t) * c_dim + c, silu_f(acc));
}

// The prefill form for bf16 x and out and width KW: each thread owns 8 channels (one 16-byte
// vector) over a run of kConvRun tokens, with the window in registers, so every input is read
// once. A run inside one sequence loads all its inputs at once; a run that crosses into another
// sequence goes token by token and refills the window there (from the conv state or zeros
// before the span's start). Runs of 8 tokens keep a thread at 128 registers, 16 warps an SM
// (session 16's ncu at 2048 tokens: runs of 16 took 168 registers, 12 warps, and waited on their
// loads at 34% of DRAM peak; runs of 8 took the 30 GDN layers' conv from 999 to 948-962 us).
constexpr int kConvRun = 8, kConvThreads = 128;

// The outputs of the run kernel: channels [start[i], start[i + 1]) go to ptr[i], rows of
// start[i + 1] - start[i] (causal_conv1d_split; one output of all C channels for causal_conv1d).
constexpr int kMaxConvOuts = 4;
struct ConvOuts {
  bf16* ptr[kMaxConvOuts];
  int64_t start[kMaxConvOuts + 1];
  int n;
};

template <int KW>
__global__ void __launch_bounds__(kConvThreads, 4) conv1d_run_kernel(const bf16* __restrict__ x, const void* w, bool w32,
                                                         const void* cs, bool cs32, DeviceBatch b, ConvOuts outs,
                                                         int64_t c_dim, int tokens) {
  constexpr int kHist = KW - 1;
  pdl_begin();
  const int64_t c = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (c >= c_dim) return;
  // Token t's 8 outputs at out + t * out_stride (every output's width is a multiple of 8). The
  // outputs are picked by constant indices: a loop to the first one past c indexed the parameters
  // at run time, which copied them to a stack frame.
  bf16* out = outs.ptr[0] + c;
  int64_t out_stride = outs.start[1];
#pragma unroll
  for (int i = 1; i < kMaxConvOuts; ++i) {
    if (i < outs.n && c >= outs.start[i]) {
      out = outs.ptr[i] + (c - outs.start[i]);
      out_stride = outs.start[i + 1] - outs.start[i];
    }
  }
  // A channel's KW = 4 taps are one 16-byte (fp32) or 8-byte (bf16) vector: scalar loads here
  // (lanes 128 bytes apart) kept the kernel at a third of the memory bandwidth.
  static_assert(KW == 4, "the taps load as one vector a channel");
  float wt[8][KW];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    if (w32) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(w) + c + e);
      wt[e][0] = v.x, wt[e][1] = v.y, wt[e][2] = v.z, wt[e][3] = v.w;
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(w) + c + e);
      const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
      const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
      wt[e][0] = lo.x, wt[e][1] = lo.y, wt[e][2] = hi.x, wt[e][3] = hi.y;
    }
  }
  const int t0 = blockIdx.x * kConvRun, t1 = min(tokens, t0 + kConvRun);
  // The window of token t's predecessors in its own sequence: win[j] is the input j + 1 tokens
  // back (from the conv state, or zeros, before the span's start).
  auto load_window = [&](int t, float (&win)[kHist > 0 ? kHist : 1][8]) {
    const int s = b.token_seq[t], qs = b.q_start[s], slot = b.slot[s], i = t - qs;
    const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
#pragma unroll
    for (int j = 0; j < kHist; ++j) {
      const int src = i - 1 - j;
      if (src >= 0) {
        unpack8(__ldg(reinterpret_cast<const uint4*>(x + int64_t(qs + src) * c_dim + c)), win[j]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          win[j][e] = has_state ? ldf(cs, cs32, (int64_t(slot) * kHist + kHist + src) * c_dim + c + e) : 0.f;
        }
      }
    }
  };
  auto conv = [&](const float (&cur)[8], const float (&win)[kHist > 0 ? kHist : 1][8], bf16* o_ptr) {
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float acc = wt[e][kHist] * cur[e];
#pragma unroll
      for (int j = 0; j < kHist; ++j) acc += wt[e][kHist - 1 - j] * win[j][e];
      o[e] = silu_f(acc);
    }
    *reinterpret_cast<uint4*>(o_ptr) = pack8(o);
  };
  // Token t's input joins the window as the next token's first predecessor.
  auto push = [&](float (&win)[kHist > 0 ? kHist : 1][8], const float (&cur)[8]) {
#pragma unroll
    for (int j = kHist - 1; j > 0; --j) {
#pragma unroll
      for (int e = 0; e < 8; ++e) win[j][e] = win[j - 1][e];
    }
    if (kHist > 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) win[0][e] = cur[e];
    }
  };
  float win[kHist > 0 ? kHist : 1][8];
  if (t1 - t0 == kConvRun && b.token_seq[t0] == b.token_seq[t1 - 1]) {
    // The whole run in one sequence (a sequence's tokens are contiguous): every input of the run
    // is loaded before any is used, so the loads are in flight together.
    uint4 raw[kConvRun];
#pragma unroll
    for (int r = 0; r < kConvRun; ++r) raw[r] = __ldg(reinterpret_cast<const uint4*>(x + int64_t(t0 + r) * c_dim + c));
    load_window(t0, win);
#pragma unroll
    for (int r = 0; r < kConvRun; ++r) {
      float cur[8];
      unpack8(raw[r], cur);
      conv(cur, win, out + int64_t(t0 + r) * out_stride);
      push(win, cur);
    }
    return;
  }
  int seq = -1;
  for (int t = t0; t < t1; ++t) {
    const int s = b.token_seq[t];
    if (s != seq) {
      seq = s;
      load_window(t, win);
    }
    float cur[8];
    unpack8(__ldg(reinterpret_cast<const uint4*>(x + int64_t(t) * c_dim + c)), cur);
    conv(cur, win, out + int64_t(t) * out_stride);
    push(win, cur);
  }
}

// After conv1d: the state keeps the last kw - 1 inputs of the window [state; x]. Row r takes
// window row q_len + r >= r, so ascending rows read the old state before overwriting it (any kw).
__global__ void conv_state_kernel(const void* x, bool x32, void* cs, bool cs32, DeviceBatch b, int64_t c_dim,
                                  int kw) {
  pdl_begin();
  const int s = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  const int slot = b.slot[s];
  if (c >= c_dim || slot < 0) return;
  const int hist = kw - 1, ql = b.q_len[s], qs = b.q_start[s];
  const bool has_state = b.ctx_len[s] > 0;
  for (int r = 0; r < hist; ++r) {
    const int idx = ql + r, src = idx - hist;
    const float v = src >= 0 ? ldf(x, x32, int64_t(qs + src) * c_dim + c)
                             : (has_state ? ldf(cs, cs32, (int64_t(slot) * hist + idx) * c_dim + c) : 0.f);
    stf(cs, cs32, (int64_t(slot) * hist + r) * c_dim + c, v);
  }
}

__device__ __forceinline__ float softplus_torch(float x) { return x > 20.f ? x : log1pf(expf(x)); }

__global__ void gates_kernel(const void* a, bool a32, const void* bb, bool b32, const void* a_log, bool l32,
                             const void* dt_bias, bool d32, float* g, float* beta, int64_t rows, int hv) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * hv; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i % hv);
    const float x = ldf(a, a32, i) + ldf(dt_bias, d32, h);
    g[i] = -expf(ldf(a_log, l32, h)) * softplus_torch(x);
    beta[i] = 1.f / (1.f + expf(-ldf(bb, b32, i)));
  }
}

// Token-by-token recurrence for the sequences in `seqs`: block (seq, value head), thread = one
// column of the state (registers hold its DK rows).
template <int DK>
__global__ void __launch_bounds__(256) gdn_recurrent_kernel(const bf16* q, const bf16* k, const bf16* v,
                                                            const float* g, const float* beta, void* state,
                                                            bool s32, DeviceBatch b, const int32_t* seqs, int hk,
                                                            int hv, int dv, bf16* out) {
  pdl_begin();
  __shared__ float qs[DK], ks[DK], red[32];
  const int s = seqs[blockIdx.x], h = blockIdx.y, kh = h / (hv / hk);
  const int c = threadIdx.x;
  const bool col = c < dv;
  const int slot = b.slot[s];
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  const int64_t st0 = (int64_t(slot) * hv + h) * DK * dv;  // padding rows (slot < 0): no state
  float sv[DK];
#pragma unroll
  for (int i = 0; i < DK; ++i) sv[i] = (has_state && col) ? ldf(state, s32, st0 + int64_t(i) * dv + c) : 0.f;
  const float scale = rsqrtf(float(DK));
  const int qs0 = b.q_start[s], ql = b.q_len[s];
  for (int i = 0; i < ql; ++i) {
    const int64_t t = qs0 + i;
    float qv = 0.f, kv = 0.f;
    if (c < DK) {
      qv = bf2f(q[(t * hk + kh) * DK + c]);
      kv = bf2f(k[(t * hk + kh) * DK + c]);
    }
    const float qn = 1.f / sqrtf(block_sum(qv * qv, red) + 1e-6f);
    const float kn = 1.f / sqrtf(block_sum(kv * kv, red) + 1e-6f);
    __syncthreads();
    if (c < DK) {
      qs[c] = qv * qn * scale;
      ks[c] = kv * kn;
    }
    __syncthreads();
    const float decay = expf(g[t * hv + h]), bt = beta[t * hv + h];
    const float vc = col ? bf2f(v[(t * hv + h) * dv + c]) : 0.f;
    float kS = 0.f;
#pragma unroll
    for (int r = 0; r < DK; ++r) {
      sv[r] *= decay;
      kS += sv[r] * ks[r];
    }
    const float delta = (vc - kS) * bt;
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < DK; ++r) {
      sv[r] += ks[r] * delta;
      o += sv[r] * qs[r];
    }
    if (col) out[(t * hv + h) * dv + c] = f2bf(o);
    if (!s32) {  // a BF16 state is rounded after every token, as single-token steps would store it
#pragma unroll
      for (int r = 0; r < DK; ++r) sv[r] = bf2f(f2bf(sv[r]));
    }
  }
  if (slot >= 0 && col) {
#pragma unroll
    for (int i = 0; i < DK; ++i) stf(state, s32, st0 + int64_t(i) * dv + c, sv[i]);
  }
}

struct DecodeArgs {
  const bf16* qkv;
  const bf16* z;
  const void* a;
  const void* b;
  const void* conv_w;
  void* conv_state;
  const void* a_log;
  const void* dt_bias;
  void* state;  // F32 or BF16 (the kernel's kState32)
  const void* norm_w;
  bf16* out;
  bool a32, b32, w32, cs32, l32, d32, n32;
  int hk, hv, dv, kw;
  int64_t conv_dim;
  float eps;
  // ForwardBatch::state_steps: the states after a sequence's tokens but the last also go to
  // slots step_first + slot * step_count + j, j < step_count (0: none; multi-token kernel only).
  // These two make the struct 136 bytes, which changes the single-token kernel's register
  // allocation; packed into 128 (step_count a byte in the bools' padding) it measured 171 us
  // against 180 us a step at batch 1 but 8.79 ms against 7.44 ms at batch 256 (20 layers of the
  // 35B-A3B shape, H100, sessions 21-22), so they stay as they are.
  int step_first, step_count;
};

// The fused step. A cluster of blocks serves one (sequence, key head): `ratio`
// value heads x `slices` column slices of `cols` state columns each, so that the whole state
// is spread over the GPU at batch 1. Every block recomputes the key head's q, k conv and l2
// norms (a few KB) and owns its value columns: their conv, their state columns (8 warps over the
// DK rows, lane = column) and their outputs. The gated RMSNorm's sum of squares over a value
// head's columns is exchanged through distributed shared memory; rank 0 writes the q, k conv
// state once every block of the cluster has read it.
constexpr int kDecodeWarps = 8;
constexpr int kMaxCluster = 8;

// A lane's state columns come in runs of V = min(CPL, 4) adjacent ones, so that each run loads
// and stores as one vector (16 bytes of fp32 or 8 of bf16 at V = 4): element m of lane l is
// column 32 V (m / V) + V l + m % V of its slice.
constexpr int decode_vec(int cpl) { return cpl < 4 ? cpl : 4; }
template <int V>
__device__ __forceinline__ int decode_column(int lane, int m) {
  return (m / V) * 32 * V + lane * V + m % V;
}

// Up to 4 columns a lane (DK / 8 x 4 state cells a thread) the registers are capped for two
// blocks an SM, so that one block's state loads run while another computes (uncapped, 128 x 128
// heads took 184 registers, one block an SM: 17.4 against 14.8 ms over 30 layers at batch 256).
// kHist > 0: the conv keeps kHist inputs (kw - 1, known at compile time, so that the window's
// loads issue together unpredicated); 0: any kw up to kMaxConvHistory + 1.
// kState32: the state pool is F32, else BF16 (loaded to fp32, rounded once when stored; with
// several tokens, after each, as the recurrence rounds it).
// kMulti: a sequence brings 1..kGdnStepMaxTokens tokens (speculative verify steps), in three
// phases: what does not read the recurrent state (gates, convs, q and k norms) for every token at
// once; the recurrence token by token with the state in registers (stored once, after the last,
// and after each other one in its step slot); the gated RMSNorm of every token's output with one
// cluster exchange. Else every sequence brings one token (decode).
template <int DK, int CPL, int kHist, bool kState32, bool kMulti>
__global__ void __launch_bounds__(kDecodeWarps * 32, CPL <= 4 ? 2 : 1) gdn_decode_kernel(DecodeArgs p, DeviceBatch b, int slices,
                                                                       int cols) {
  pdl_begin();
  constexpr int kRows = DK / kDecodeWarps, kCols = 32 * CPL, kV = decode_vec(CPL);
  // Multi-token, q, k and v of every token (v then the token's output before its norm), and the
  // token's gates and norms; single-token, one of each.
  constexpr int kTok = kMulti ? kGdnStepMaxTokens : 1;
  __shared__ float qs[kTok * DK], ks[kTok * DK], vs[kTok * kCols], delta[kCols], red[32];
  __shared__ float part[kDecodeWarps][kCols];
  __shared__ float ss_block[kTok], decay_sm[kTok], beta_sm[kTok], qscale[kTok], kscale[kTok];
  cg::cluster_group cluster = cg::this_cluster();
  const int s = blockIdx.z, kh = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ratio = p.hv / p.hk, r = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int h = kh * ratio + r, c0 = slice * cols, ncols = max(0, min(cols, p.dv - c0));
  const int t0 = b.q_start[s], slot = b.slot[s], tokens = kMulti ? b.q_len[s] : 1;
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  // First the loads that do not wait for the conv: this thread's state cells (rows warp + 8 i,
  // columns decode_column(lane, m) of the slice), the gates, and its output column's z and norm weight.
  float sv[kRows][CPL];
  using StateT = std::conditional_t<kState32, float, bf16>;
  StateT* st = slot >= 0 ? static_cast<StateT*>(p.state) + (int64_t(slot) * p.hv + h) * DK * p.dv + c0 : nullptr;
  const bool vec = p.dv % kV == 0 && cols % kV == 0;  // every run starts V-aligned
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int m = 0; m < CPL; m += kV) {
      const int c = decode_column<kV>(lane, m);
      ld_state_run<kV>(st + int64_t(warp + kDecodeWarps * i) * p.dv + c, has_state ? ncols - c : 0, vec, &sv[i][m]);
    }
  }
  // The single-token kernel's gates and output column's z, loaded up front (the multi-token
  // kernel loads every token's in its first phase).
  float decay, beta, zo;
  int64_t oi;  // token t's output element of this thread's column
  auto load_token = [&](int t) {
    const int64_t gi = int64_t(t) * p.hv + h;
    decay = expf(-expf(ldf(p.a_log, p.l32, h)) * softplus_torch(ldf(p.a, p.a32, gi) + ldf(p.dt_bias, p.d32, h)));
    beta = 1.f / (1.f + expf(-ldf(p.b, p.b32, gi)));
    oi = (int64_t(t) * p.hv + h) * p.dv + c0 + tid;
    zo = tid < ncols ? silu_f(bf2f(p.z[oi])) : 0.f;
  };
  if constexpr (!kMulti) load_token(t0);
  const float nw = tid < ncols ? ldf(p.norm_w, p.n32, c0 + tid) : 0.f;
  constexpr int kWin = kHist > 0 ? kHist : kMaxConvHistory;
  const int hist = kHist > 0 ? kHist : p.kw - 1;
  // A channel's conv window: its last `hist` inputs, oldest first (the conv state, or zeros). The
  // loops run to the compile-time bound so that `win` stays in registers and the loads issue together.
  auto load_window = [&](int64_t ch, float* win) {
#pragma unroll
    for (int j = 0; j < kWin; ++j) {
      win[j] = has_state && j < hist
                   ? ldf(p.conv_state, p.cs32, (int64_t(slot) * hist + j) * p.conv_dim + ch)
                   : 0.f;
    }
  };
  // Causal conv of one channel at token t (its input x_new): `win` holds the inputs before t (the conv state, then
  // this step's earlier tokens) and is shifted to end holding those up to t, the new conv state
  // after the last token.
  auto conv = [&](int64_t ch, float* win, float x_new) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < kWin; ++j) {
      if (j < hist) acc += ldf(p.conv_w, p.w32, ch * (hist + 1) + j) * win[j];
    }
    acc += ldf(p.conv_w, p.w32, ch * (hist + 1) + hist) * x_new;
    // Shift: the new state is the window's last `hist` inputs.
#pragma unroll
    for (int j = 0; j < kWin; ++j) {
      if (j + 1 < hist) {
        win[j] = win[j + 1];
      } else if (j + 1 == hist) {
        win[j] = x_new;
      }
    }
    return silu_f(acc);
  };
  float qk_win[kWin], v_win[kWin];
  const int64_t qk_ch = tid < DK ? int64_t(kh) * DK + tid : int64_t(p.hk) * DK + int64_t(kh) * DK + (tid - DK);
  // This thread's value channel, computed where it is used (hoisted, it cost the single-token
  // kernel registers).
  auto v_channel = [&] { return 2 * int64_t(p.hk) * DK + int64_t(h) * p.dv + c0 + tid; };
  // This thread's state cells into `dst` (a slot's state of head h at slice column c0; row stride
  // dv), and a channel's conv window into slot `at`'s conv state: after a single token, after a
  // verify token (per-token states) and after a multi-token step's last token.
  auto store_state = [&](StateT* dst, int dv) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
      for (int m = 0; m < CPL; m += kV) {
        const int c = decode_column<kV>(lane, m);
        st_state_run<kV>(dst + int64_t(warp + kDecodeWarps * i) * dv + c, ncols - c, vec, &sv[i][m]);
      }
    }
  };
  auto store_window = [&](int at, int64_t ch, const float* win) {
#pragma unroll
    for (int j = 0; j < kWin; ++j) {
      if (j < hist) stf(p.conv_state, p.cs32, (int64_t(at) * hist + j) * p.conv_dim + ch, win[j]);
    }
  };
  // One token of the recurrence on this thread's state cells: S *= decay; k·S, summed over the
  // warps through `part`; delta = (v - k·S) beta; S += k delta; and this warp's share of S·q
  // into `part` (summed by the caller after a barrier).
  auto recur = [&](float decay, float beta, const float* kt, const float* qt, const float* v) {
#pragma unroll
    for (int m = 0; m < CPL; ++m) {
      float kS = 0.f;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        sv[i][m] *= decay;
        kS += sv[i][m] * kt[warp + kDecodeWarps * i];
      }
      part[warp][decode_column<kV>(lane, m)] = kS;
    }
    __syncthreads();
    if (tid < ncols) {
      float kS = 0.f;
      for (int w = 0; w < kDecodeWarps; ++w) kS += part[w][tid];
      delta[tid] = (v[tid] - kS) * beta;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < CPL; ++m) {
      const int c = decode_column<kV>(lane, m);
      const float dl = c < ncols ? delta[c] : 0.f;
      float o = 0.f;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int row = warp + kDecodeWarps * i;
        sv[i][m] += kt[row] * dl;
        o += sv[i][m] * qt[row];
      }
      part[warp][c] = o;
    }
  };
  if constexpr (kMulti) {
    // Phase 1, every token at once (nothing here reads the recurrent state): the gates, the convs
    // (each thread runs its channel through the tokens with its window in registers, and after a
    // token but the last keeps the window in the sequence's step slot for it:
    // ForwardBatch::state_steps), then q and k l2-normalised.
    const auto step_slot = [&](int tok) { return p.step_first + slot * p.step_count + tok; };
    const bool keep_steps = slot >= 0;
    if (tid < tokens) {
      const int64_t gi = int64_t(t0 + tid) * p.hv + h;
      decay_sm[tid] = expf(-expf(ldf(p.a_log, p.l32, h)) * softplus_torch(ldf(p.a, p.a32, gi) + ldf(p.dt_bias, p.d32, h)));
      beta_sm[tid] = 1.f / (1.f + expf(-ldf(p.b, p.b32, gi)));
    }
    if (tid < 2 * DK) {
      load_window(qk_ch, qk_win);
      float* dst = tid < DK ? qs + tid : ks + (tid - DK);
      for (int tok = 0; tok < tokens; ++tok) {
        dst[tok * DK] = conv(qk_ch, qk_win, bf2f(p.qkv[int64_t(t0 + tok) * p.conv_dim + qk_ch]));
        if (keep_steps && tok + 1 < tokens && tok < p.step_count && cluster.block_rank() == 0) {
          store_window(step_slot(tok), qk_ch, qk_win);
        }
      }
    }
    if (tid < ncols) {
      const int64_t v_ch = v_channel();
      load_window(v_ch, v_win);
      for (int tok = 0; tok < tokens; ++tok) {
        vs[tok * kCols + tid] = conv(v_ch, v_win, bf2f(p.qkv[int64_t(t0 + tok) * p.conv_dim + v_ch]));
        if (keep_steps && tok + 1 < tokens && tok < p.step_count) store_window(step_slot(tok), v_ch, v_win);
      }
    }
    __syncthreads();
    for (int tok = warp; tok < tokens; tok += kDecodeWarps) {
      float qq = 0.f, kk = 0.f;
      for (int i = lane; i < DK; i += 32) {
        qq += qs[tok * DK + i] * qs[tok * DK + i];
        kk += ks[tok * DK + i] * ks[tok * DK + i];
      }
      qq = warp_sum(qq);
      kk = warp_sum(kk);
      if (lane == 0) {
        qscale[tok] = (1.f / sqrtf(qq + 1e-6f)) * rsqrtf(float(DK));
        kscale[tok] = 1.f / sqrtf(kk + 1e-6f);
      }
    }
    __syncthreads();
    for (int i = tid; i < tokens * DK; i += kDecodeWarps * 32) {
      qs[i] *= qscale[i / DK];
      ks[i] *= kscale[i / DK];
    }
    __syncthreads();
    // Phase 2, the recurrence token by token: four block barriers a token, no cluster exchange.
    for (int tok = 0; tok < tokens; ++tok) {
      recur(decay_sm[tok], beta_sm[tok], ks + tok * DK, qs + tok * DK, vs + tok * kCols);
      if constexpr (!kState32) {
        // A BF16 state is rounded after every token, as the recurrence rounds it (and single-token
        // steps would store it); the last token's rounding is the store's.
        if (tok + 1 < tokens) {
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
#pragma unroll
            for (int m = 0; m < CPL; ++m) sv[i][m] = bf2f(f2bf(sv[i][m]));
          }
        }
      }
      // Speculative rollback: the state after this token, unless it is the last, in the step slot
      // for it. No block of this launch reads a step slot, so the stores need no ordering.
      if (keep_steps && tok + 1 < tokens && tok < p.step_count) {
        store_state(static_cast<StateT*>(p.state) + (int64_t(step_slot(tok)) * p.hv + h) * DK * p.dv + c0, p.dv);
      }
      __syncthreads();
      if (tid < ncols) {  // the token's output before its norm, where its v was
        float o = 0.f;
        for (int w = 0; w < kDecodeWarps; ++w) o += part[w][tid];
        vs[tok * kCols + tid] = o;
      }
      __syncthreads();
    }
    // Phase 3, the gated RMSNorm of every token's output: this block's sums of squares, exchanged
    // with the value head's other slices through distributed shared memory in one cluster sync.
    for (int tok = warp; tok < tokens; tok += kDecodeWarps) {
      float ss = 0.f;
      for (int c = lane; c < ncols; c += 32) ss += vs[tok * kCols + c] * vs[tok * kCols + c];
      ss = warp_sum(ss);
      if (lane == 0) ss_block[tok] = ss;
    }
    cluster.sync();  // every block has read the q, k conv state and published its sums of squares
    if (tid < ncols) {
      for (int tok = 0; tok < tokens; ++tok) {
        float total = 0.f;
        for (int j = 0; j < slices; ++j) total += cluster.map_shared_rank(ss_block, unsigned(r * slices + j))[tok];
        const int64_t o_at = (int64_t(t0 + tok) * p.hv + h) * p.dv + c0 + tid;
        const float inv = 1.f / sqrtf(total / float(p.dv) + p.eps);
        p.out[o_at] = f2bf(nw * (vs[tok * kCols + tid] * inv) * silu_f(bf2f(p.z[o_at])));
      }
    }
    // The state and the conv windows after the last token (the q, k conv state only now: every
    // block of the cluster read it before the cluster sync).
    if (st) store_state(st, p.dv);
    if (slot >= 0 && tid < ncols) store_window(slot, v_channel(), v_win);
    if (cluster.block_rank() == 0 && slot >= 0 && tid < 2 * DK) store_window(slot, qk_ch, qk_win);
  } else {
    if (tid < 2 * DK) {
      load_window(qk_ch, qk_win);
      const float v = conv(qk_ch, qk_win, bf2f(p.qkv[int64_t(t0) * p.conv_dim + qk_ch]));
      (tid < DK ? qs[tid] : ks[tid - DK]) = v;
    }
    if (tid < ncols) {
      const int64_t v_ch = v_channel();
      load_window(v_ch, v_win);
      vs[tid] = conv(v_ch, v_win, bf2f(p.qkv[int64_t(t0) * p.conv_dim + v_ch]));
      if (slot >= 0) store_window(slot, v_ch, v_win);
    }
    __syncthreads();
    const float qq = block_sum(tid < DK ? qs[tid] * qs[tid] : 0.f, red);
    const float kk = block_sum(tid < DK ? ks[tid] * ks[tid] : 0.f, red);
    __syncthreads();
    if (tid < DK) {
      qs[tid] *= (1.f / sqrtf(qq + 1e-6f)) * rsqrtf(float(DK));
      ks[tid] *= 1.f / sqrtf(kk + 1e-6f);
    }
    __syncthreads();
    recur(decay, beta, ks, qs, vs);
    if (st) store_state(st, p.dv);
    __syncthreads();
    float o = 0.f;
    if (tid < ncols) {
      for (int w = 0; w < kDecodeWarps; ++w) o += part[w][tid];
    }
    const float ss = block_sum(o * o, red);
    if (tid == 0) ss_block[0] = ss;
    cluster.sync();  // every block has read the q, k conv state and published its sum of squares
    if (cluster.block_rank() == 0 && slot >= 0 && tid < 2 * DK) store_window(slot, qk_ch, qk_win);
    float total = 0.f;
    for (int j = 0; j < slices; ++j) total += *cluster.map_shared_rank(&ss_block[0], unsigned(r * slices + j));
    if (tid < ncols) {
      const float inv = 1.f / sqrtf(total / float(p.dv) + p.eps);
      p.out[oi] = f2bf(nw * (o * inv) * zo);
    }
  }
  cluster.sync();  // no block leaves while another reads its shared memory
}

template <int DK, int CPL, int kHist, bool kMulti>
void launch_decode_kernel(const DecodeArgs& p, bool state32, const DeviceBatch& db, int seqs, int slices, int cols) {
  const int ratio = p.hv / p.hk;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(ratio * slices), unsigned(p.hk), unsigned(seqs));
  cfg.blockDim = dim3(kDecodeWarps * 32);
  cfg.stream = stream();
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = unsigned(ratio * slices);
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = 2;
  if (state32) {
    STRATA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gdn_decode_kernel<DK, CPL, kHist, true, kMulti>, p, db, slices, cols));
  } else {
    STRATA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gdn_decode_kernel<DK, CPL, kHist, false, kMulti>, p, db, slices, cols));
  }
}

// The single-token kernel unless some sequence brings several tokens. A run-time conv width
// (kHist 0, no model's) has only the multi-token kernel, which runs single tokens as well: half
// the instantiations of a path that only tests take.
template <int DK, int CPL, int kHist>
void launch_decode_hist(const DecodeArgs& p, bool state32, const DeviceBatch& db, int seqs, bool multi, int slices,
                        int cols) {
  if (kHist == 0 || multi) return launch_decode_kernel<DK, CPL, kHist, true>(p, state32, db, seqs, slices, cols);
  if constexpr (kHist > 0) launch_decode_kernel<DK, CPL, kHist, false>(p, state32, db, seqs, slices, cols);
}

// The models' conv width 4 compiled in; any other width at run time.
template <int DK, int CPL>
void launch_decode(const DecodeArgs& p, bool state32, const DeviceBatch& db, int seqs, bool multi, int slices,
                   int cols) {
  if (p.kw == 4) return launch_decode_hist<DK, CPL, 3>(p, state32, db, seqs, multi, slices, cols);
  launch_decode_hist<DK, CPL, 0>(p, state32, db, seqs, multi, slices, cols);
}

// One cluster a (sequence, key head) whatever its tokens: the slicing follows the sequences.
template <int DK>
void launch_decode_dk(const DecodeArgs& p, bool state32, const DeviceBatch& db, int seqs, bool multi) {
  // Column slices (at least 32 columns each, as many as a cluster holds) only while the batch
  // alone leaves SMs idle: each slice repeats the key head's conv and norms.
  const int ratio = p.hv / p.hk;
  const int want = (2 * sm_count() + seqs * p.hv - 1) / (seqs * p.hv);
  const int slices = std::max(1, std::min({kMaxCluster / ratio, (p.dv + 31) / 32, want}));
  const int cols = (p.dv + slices - 1) / slices;
  switch ((cols + 31) / 32) {
    case 1: return launch_decode<DK, 1>(p, state32, db, seqs, multi, slices, cols);
    case 2: return launch_decode<DK, 2>(p, state32, db, seqs, multi, slices, cols);
    case 3:
    case 4: return launch_decode<DK, 4>(p, state32, db, seqs, multi, slices, cols);
    default: return launch_decode<DK, 8>(p, state32, db, seqs, multi, slices, cols);
  }
}

template <int DK>
void launch_recurrent(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const DeviceBatch& db, const std::vector<int32_t>& seqs, int hk,
                      int hv, int dv, const Tensor& out) {
  Tensor keep;
  const int32_t* d_seqs = device_ints(seqs, &keep);
  const int threads = std::max(32, (std::max(dv, DK) + 31) / 32 * 32);
  launch_pdl(gdn_recurrent_kernel<DK>, dim3(unsigned(seqs.size()), unsigned(hv)), threads, 0, 
      static_cast<const bf16*>(q.raw()), static_cast<const bf16*>(k.raw()), static_cast<const bf16*>(v.raw()),
      g.data<float>(), beta.data<float>(), state.raw(), is_f32(state), db, d_seqs, hk, hv, dv,
      static_cast<bf16*>(out.raw()));
  check_launch("gdn_recurrent");
}

}  // namespace

namespace {

// causal_conv1d into `outs`, column blocks of C (one output: all of it).
void run_causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& conv_state, const ForwardBatch& batch,
                       const std::vector<Tensor>& outs, const char* op) {
  expect_float(x, op, "x");
  expect_float(w, op, "weight");
  expect_float(conv_state, op, "conv_state");
  const int64_t t = x.dim(0), c = x.dim(1), kw = w.dim(1);
  STRATA_CHECK(w.shape() == Shape({c, kw}) && kw >= 1 && conv_state.ndim() == 3 && conv_state.dim(1) == kw - 1 &&
                   conv_state.dim(2) == c,
               op, ": x ", x.describe(), ", weight ", w.describe(), ", conv state ", conv_state.describe());
  STRATA_CHECK(!outs.empty() && outs.size() <= size_t(kMaxConvOuts), op, ": ", outs.size(), " outputs (1 to ",
               kMaxConvOuts, ")");
  ConvOuts o{};
  o.n = int(outs.size());
  bool vec = kw == 4 && c % 8 == 0 && !is_f32(x) && aligned16(x.raw()) && aligned16(w.raw());
  int64_t col = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    expect_float(outs[i], op, "out");
    STRATA_CHECK(outs[i].ndim() >= 1 && rows_of(outs[i]) == t, op, ": out ", outs[i].describe(), " for x ",
                 x.describe());
    o.ptr[i] = static_cast<bf16*>(outs[i].raw());
    o.start[i] = col;
    col += outs[i].dim(-1);
    vec = vec && !is_f32(outs[i]) && aligned16(outs[i].raw()) && outs[i].dim(-1) % 8 == 0;
  }
  o.start[o.n] = col;
  STRATA_CHECK(col == c, op, ": the outputs cover ", col, " of x's ", c, " channels");
  if (t == 0) return;
  const DeviceBatch& db = device_batch(batch);
  const unsigned cb = blocks_for(c, 256);
  if (vec) {
    launch_pdl(conv1d_run_kernel<4>, dim3(unsigned((t + kConvRun - 1) / kConvRun), blocks_for(c / 8, kConvThreads)),
               kConvThreads, 0,
               static_cast<const bf16*>(x.raw()), w.raw(), is_f32(w), conv_state.raw(), is_f32(conv_state), db, o, c,
               int(t));
    check_launch("conv1d");
  } else {
    Tensor all = outs.size() == 1 ? outs[0] : scratch({t, c}, outs[0].dtype());
    launch_pdl(conv1d_kernel, dim3(unsigned(t), cb), 256, 0, x.raw(), is_f32(x), w.raw(), is_f32(w),
               conv_state.raw(), is_f32(conv_state), db, all.raw(), is_f32(all), c, int(kw));
    check_launch("conv1d");
    if (outs.size() > 1) split_columns(all, outs);
  }
  launch_pdl(conv_state_kernel, dim3(unsigned(db.num_seqs), cb), 256, 0,
      x.raw(), is_f32(x), conv_state.raw(), is_f32(conv_state), db, c, int(kw));
  check_launch("conv_state");
}

}  // namespace

void causal_conv1d(const Tensor& x, const Tensor& w, const Tensor& conv_state, const ForwardBatch& batch,
                   const Tensor& out) {
  OpTimer timer_("causal_conv1d");
  STRATA_CHECK(out.shape() == x.shape(), "causal_conv1d: out ", out.describe(), " for x ", x.describe());
  run_causal_conv1d(x, w, conv_state, batch, {out}, "causal_conv1d");
}

void causal_conv1d_split(const Tensor& x, const Tensor& w, const Tensor& conv_state, const ForwardBatch& batch,
                         const std::vector<Tensor>& outs) {
  OpTimer timer_("causal_conv1d");
  run_causal_conv1d(x, w, conv_state, batch, outs, "causal_conv1d_split");
}

void gdn_gates(const Tensor& a, const Tensor& b, const Tensor& a_log, const Tensor& dt_bias, const Tensor& g,
               const Tensor& beta) {
  OpTimer timer_("gdn_gates");
  expect_float(a, "gdn_gates", "a");
  expect_float(b, "gdn_gates", "b");
  expect_float(a_log, "gdn_gates", "A_log");
  expect_float(dt_bias, "gdn_gates", "dt_bias");
  expect_dtype(g, DType::kF32, "gdn_gates", "g");
  expect_dtype(beta, DType::kF32, "gdn_gates", "beta");
  const int64_t t = a.dim(0), hv = a.dim(1);
  STRATA_CHECK(b.shape() == a.shape() && g.shape() == a.shape() && beta.shape() == a.shape() &&
                   a_log.numel() == hv && dt_bias.numel() == hv,
               "gdn_gates: a ", a.describe(), ", b ", b.describe(), ", g ", g.describe(), ", beta ",
               beta.describe(), ", A_log ", a_log.describe(), ", dt_bias ", dt_bias.describe());
  if (!a.numel()) return;
  launch_pdl(gates_kernel, blocks_for(t * hv, 256), 256, 0, a.raw(), is_f32(a), b.raw(), is_f32(b),
                                                              a_log.raw(), is_f32(a_log), dt_bias.raw(),
                                                              is_f32(dt_bias), g.data<float>(),
                                                              beta.data<float>(), t, int(hv));
  check_launch("gdn_gates");
}

void gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                      const Tensor& state, const ForwardBatch& batch, const Tensor& out, GdnAlgorithm algorithm) {
  OpTimer timer_("gated_delta_rule");
  for (const Tensor* x : {&q, &k, &v, &out}) expect_dtype(*x, DType::kBF16, "gated_delta_rule", "q, k, v, out");
  for (const Tensor* x : {&g, &beta}) expect_dtype(*x, DType::kF32, "gated_delta_rule", "g, beta");
  expect_float(state, "gated_delta_rule", "state");
  const int64_t t = q.dim(0), hk = q.dim(1), dk = q.dim(2), hv = v.dim(1), dv = v.dim(2);
  STRATA_CHECK(q.ndim() == 3 && k.shape() == q.shape() && v.ndim() == 3 && v.dim(0) == t &&
                   g.shape() == Shape({t, hv}) && beta.shape() == g.shape() && out.shape() == v.shape() &&
                   hv % hk == 0 && state.ndim() == 4 && state.dim(1) == hv && state.dim(2) == dk &&
                   state.dim(3) == dv,
               "gated_delta_rule: q ", q.describe(), ", v ", v.describe(), ", state ", state.describe());
  STRATA_CHECK(dv <= 256, "gated_delta_rule: value head dim ", dv, " > 256 is not supported on CUDA");
  if (t == 0) return;
  const DeviceBatch& db = device_batch(batch);
  std::vector<int32_t> single, spans;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const bool one = batch.seqs[s].q_len == 1 || algorithm == GdnAlgorithm::kRecurrent;
    (one ? single : spans).push_back(int32_t(s));
  }
  if (!spans.empty()) gdn_chunked(q, k, v, g, beta, state, batch, db, spans, out);
  if (single.empty()) return;
  const int ihk = int(hk), ihv = int(hv), idv = int(dv);
  switch (dk) {
    case 8: return launch_recurrent<8>(q, k, v, g, beta, state, db, single, ihk, ihv, idv, out);
    case 16: return launch_recurrent<16>(q, k, v, g, beta, state, db, single, ihk, ihv, idv, out);
    case 32: return launch_recurrent<32>(q, k, v, g, beta, state, db, single, ihk, ihv, idv, out);
    case 64: return launch_recurrent<64>(q, k, v, g, beta, state, db, single, ihk, ihv, idv, out);
    case 128: return launch_recurrent<128>(q, k, v, g, beta, state, db, single, ihk, ihv, idv, out);
    default: fail("gated_delta_rule: key head dim ", dk, " is not supported on CUDA (8, 16, 32, 64 or 128)");
  }
}

void gdn_decode_step(const Tensor& qkv, const Tensor& z, const Tensor& a, const Tensor& b, const Tensor& conv_w,
                     const Tensor& conv_state, const Tensor& a_log, const Tensor& dt_bias, const Tensor& state,
                     const Tensor& norm_w, float eps, const ForwardBatch& batch, const Tensor& out) {
  OpTimer timer_("gdn_decode_step");
  const char* op = "gdn_decode_step";
  expect_dtype(qkv, DType::kBF16, op, "qkv");
  expect_dtype(z, DType::kBF16, op, "z");
  expect_dtype(out, DType::kBF16, op, "out");
  expect_float(state, op, "state");
  for (const Tensor* x : {&a, &b, &conv_w, &conv_state, &a_log, &dt_bias, &norm_w}) expect_float(*x, op, "input");
  const int64_t t = qkv.dim(0), conv_dim = qkv.dim(1), hv = out.dim(1), dv = out.dim(2), dk = state.dim(2);
  const int64_t kw = conv_w.dim(1);
  const int64_t qk_cols = conv_dim - hv * dv;
  STRATA_CHECK(qkv.ndim() == 2 && out.ndim() == 3 && out.dim(0) == t && state.ndim() == 4 && state.dim(1) == hv &&
                   state.dim(3) == dv && qk_cols > 0 && qk_cols % (2 * dk) == 0 && z.shape() == out.shape() &&
                   a.shape() == Shape({t, hv}) && b.shape() == a.shape() && conv_w.shape() == Shape({conv_dim, kw}) &&
                   kw >= 1 && kw <= kMaxConvHistory + 1 && conv_state.ndim() == 3 && conv_state.dim(1) == kw - 1 &&
                   conv_state.dim(2) == conv_dim && norm_w.numel() == dv && a_log.numel() == hv &&
                   dt_bias.numel() == hv,
               "gdn_decode_step: qkv ", qkv.describe(), ", out ", out.describe(), ", state ", state.describe(),
               ", conv state ", conv_state.describe());
  const int64_t hk = qk_cols / (2 * dk);
  STRATA_CHECK(hv % hk == 0 && dv <= 256, "gdn_decode_step: ", hv, " value heads of ", dv, " for ", hk,
               " key heads");
  // A cluster runs each sequence's tokens in order; the multi-token kernel only when some
  // sequence brings several (decode batches keep the single-token one).
  int64_t rows = 0;
  bool multi = false;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const SeqInBatch& s = batch.seqs[i];
    STRATA_CHECK(s.q_len >= 1 && s.q_len <= kGdnStepMaxTokens, "gdn_decode_step: sequence ", i, " has ", s.q_len,
                 " new tokens (1 to ", kGdnStepMaxTokens, ")");
    STRATA_CHECK(s.q_start >= 0 && s.q_start + s.q_len <= t, "gdn_decode_step: sequence ", i, "'s rows [",
                 s.q_start, ", +", s.q_len, ") are not in qkv's ", t);
    rows += s.q_len;
    multi = multi || s.q_len > 1;
  }
  STRATA_CHECK(rows == t, "gdn_decode_step: ", batch.seqs.size(), " sequences of ", rows, " tokens for ", t, " rows");
  if (t == 0) return;
  const int seqs = int(batch.seqs.size());
  const DeviceBatch& db = device_batch(batch);
  STRATA_CHECK(batch.state_steps.count >= 0 && batch.state_steps.count < kGdnStepMaxTokens, "gdn_decode_step: ",
               batch.state_steps.count, " per-token states a sequence (at most ", kGdnStepMaxTokens - 1, ")");
  DecodeArgs p{static_cast<const bf16*>(qkv.raw()), static_cast<const bf16*>(z.raw()), a.raw(), b.raw(),
               conv_w.raw(), conv_state.raw(), a_log.raw(), dt_bias.raw(), state.raw(), norm_w.raw(),
               static_cast<bf16*>(out.raw()), is_f32(a), is_f32(b), is_f32(conv_w), is_f32(conv_state),
               is_f32(a_log), is_f32(dt_bias), is_f32(norm_w), int(hk), int(hv), int(dv), int(kw), conv_dim, eps,
               batch.state_steps.first, batch.state_steps.count};
  STRATA_CHECK(hv / hk <= kMaxCluster, "gdn_decode_step: ", hv / hk, " value heads per key head (at most ",
               kMaxCluster, " on CUDA)");
  switch (dk) {
    case 16: launch_decode_dk<16>(p, is_f32(state), db, seqs, multi); break;
    case 32: launch_decode_dk<32>(p, is_f32(state), db, seqs, multi); break;
    case 64: launch_decode_dk<64>(p, is_f32(state), db, seqs, multi); break;
    case 128: launch_decode_dk<128>(p, is_f32(state), db, seqs, multi); break;
    default: fail("gdn_decode_step: key head dim ", dk, " is not supported on CUDA (16, 32, 64 or 128)");
  }
  check_launch("gdn_decode");
}

}  // namespace strata::ops::cuda
