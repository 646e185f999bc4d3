// CUDA: the chunked gated delta rule for prefill spans (HF's torch_chunk_gated_delta_rule, the
// CPU's kChunked; chunks of 64 from each span's start), in two kernels:
//  1. prep, parallel over every (chunk, value head): l2-normalised q, k; the decay cumsum; the
//     strictly lower A = beta (k k^T) decay and the causal attn = (q k^T) decay; the unit
//     lower-triangular solves U = (I + A)^-1 beta v and W = (I + A)^-1 beta k e^cum; all in fp32
//     shared memory, written to a workspace with q e^cum and k e^(last - cum);
//  2. scan, sequential over a sequence's chunks, parallel over (value head, 32-column slice of
//     the state): vnew = U - W S, out = (q e^cum) S + attn vnew, S = S e^last + (k e^..)^T vnew.
// fp32 CUDA-core FMAs throughout: the per-chunk products are small (64 x 128 x 64) and the
// solve is sequential in rows, so the state scan, not the arithmetic, sets the time.
#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/gdn_internal.h"

namespace strata::ops::cuda {
namespace {

constexpr int kChunk = kGdnChunk;
constexpr int kLdA = kChunk + 1;

size_t prep_smem(int dk, int dv) {
  return sizeof(float) * (2 * size_t(kChunk) * (dk + 1) + 2 * kChunk + 2 * size_t(kChunk) * kLdA +
                          size_t(kChunk) * dv + size_t(kChunk) * dk);
}

size_t scan_smem(int dk, int cb) {
  return sizeof(float) * (size_t(dk) * cb + 3 * size_t(kChunk) * dk + size_t(kChunk) * kChunk + 2 * size_t(kChunk) * cb);
}

__global__ void __launch_bounds__(256) gdn_chunk_prep_kernel(const bf16* q, const bf16* k, const bf16* v,
                                                             const float* g, const float* beta, DeviceBatch b,
                                                             const int32_t* chunks, int hk, int hv, int dk, int dv,
                                                             float* ws) {
  pdl_begin();
  extern __shared__ float sm[];
  const int ldk = dk + 1;
  float* qn = sm;
  float* kn = qn + kChunk * ldk;
  float* cum = kn + kChunk * ldk;
  float* bet = cum + kChunk;
  float* a = bet + kChunk;
  float* qk = a + kChunk * kLdA;
  float* u = qk + kChunk * kLdA;
  float* w = u + kChunk * dv;

  const int chunk = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int s = chunks[3 * chunk], c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
  const int kh = h / (hv / hk);
  const int64_t t0 = int64_t(b.q_start[s]) + c0;
  for (int idx = tid; idx < kChunk * dk; idx += blockDim.x) {
    const int i = idx / dk, c = idx % dk;
    float qv = 0.f, kv = 0.f;
    if (i < n) {
      qv = bf2f(q[((t0 + i) * hk + kh) * dk + c]);
      kv = bf2f(k[((t0 + i) * hk + kh) * dk + c]);
    }
    qn[i * ldk + c] = qv;
    kn[i * ldk + c] = kv;
  }
  if (tid < kChunk) bet[tid] = tid < n ? beta[(t0 + tid) * hv + h] : 0.f;
  __syncthreads();
  l2norm_qk_rows(qn, kn, ldk, dk, n, 1.f / sqrtf(float(dk)));
  if (tid == 0) {
    float acc = 0.f;
    for (int i = 0; i < kChunk; ++i) cum[i] = i < n ? (acc += g[(t0 + i) * hv + h]) : acc;
  }
  __syncthreads();
  for (int idx = tid; idx < kChunk * kChunk; idx += blockDim.x) {
    const int i = idx / kChunk, j = idx % kChunk;
    float av = 0.f, qv = 0.f;
    if (i < n && j <= i) {
      float kk = 0.f, qq = 0.f;
      for (int c = 0; c < dk; ++c) {
        kk += kn[i * ldk + c] * kn[j * ldk + c];
        qq += qn[i * ldk + c] * kn[j * ldk + c];
      }
      const float decay = expf(cum[i] - cum[j]);
      if (j < i) av = bet[i] * kk * decay;
      qv = qq * decay;
    }
    a[i * kLdA + j] = av;
    qk[i * kLdA + j] = qv;
  }
  __syncthreads();
  for (int col = tid; col < dv + dk; col += blockDim.x) {
    if (col < dv) {
      for (int i = 0; i < kChunk; ++i) {
        float val = 0.f;
        if (i < n) {
          val = bet[i] * bf2f(v[((t0 + i) * hv + h) * dv + col]);
          for (int j = 0; j < i; ++j) val -= a[i * kLdA + j] * u[j * dv + col];
        }
        u[i * dv + col] = val;
      }
    } else {
      const int c = col - dv;
      for (int i = 0; i < kChunk; ++i) {
        float val = 0.f;
        if (i < n) {
          val = bet[i] * kn[i * ldk + c] * expf(cum[i]);
          for (int j = 0; j < i; ++j) val -= a[i * kLdA + j] * w[j * dk + c];
        }
        w[i * dk + c] = val;
      }
    }
  }
  __syncthreads();
  const GdnWs lay(dk, dv);
  float* o_w = ws + (int64_t(chunk) * hv + h) * lay.floats;
  float* o_u = o_w + lay.u;
  float* o_attn = o_w + lay.attn;
  float* o_qe = o_w + lay.qe;
  float* o_kd = o_w + lay.kd;
  float* o_decay = o_w + lay.decay;
  const float last = cum[n - 1];
  for (int idx = tid; idx < kChunk * dk; idx += blockDim.x) {
    const int i = idx / dk, c = idx % dk;
    o_w[idx] = w[idx];
    o_qe[idx] = qn[i * ldk + c] * expf(cum[i]);
    o_kd[idx] = i < n ? kn[i * ldk + c] * expf(last - cum[i]) : 0.f;
  }
  for (int idx = tid; idx < kChunk * dv; idx += blockDim.x) o_u[idx] = u[idx];
  for (int idx = tid; idx < kChunk * kChunk; idx += blockDim.x) o_attn[idx] = qk[(idx / kChunk) * kLdA + idx % kChunk];
  if (tid == 0) *o_decay = expf(last);
}

__global__ void __launch_bounds__(256) gdn_chunk_scan_kernel(const float* ws, const int32_t* seqinfo,
                                                             const int32_t* chunks, void* state, bool s32,
                                                             DeviceBatch b, int hv, int dk, int dv, int cb, bf16* out) {
  pdl_begin();
  extern __shared__ float sm[];
  float* st = sm;                 // [dk][cb]
  float* wc = st + dk * cb;       // [64][dk]
  float* qc = wc + kChunk * dk;   // [64][dk]
  float* kc = qc + kChunk * dk;   // [64][dk]
  float* at = kc + kChunk * dk;   // [64][64]
  float* uc = at + kChunk * kChunk;  // [64][cb]
  float* vn = uc + kChunk * cb;   // [64][cb]

  const int e = blockIdx.x, h = blockIdx.y, col0 = blockIdx.z * cb, tid = threadIdx.x;
  const int s = seqinfo[3 * e], first = seqinfo[3 * e + 1], count = seqinfo[3 * e + 2];
  const int slot = b.slot[s];
  const bool has_state = slot >= 0 && b.ctx_len[s] > 0;
  const int64_t state0 = (int64_t(slot) * hv + h) * dk * dv;  // padding rows (slot < 0): no state
  for (int idx = tid; idx < dk * cb; idx += blockDim.x) {
    st[idx] = has_state ? ldf(state, s32, state0 + int64_t(idx / cb) * dv + col0 + idx % cb) : 0.f;
  }
  const GdnWs lay(dk, dv);
  for (int ci = 0; ci < count; ++ci) {
    const int chunk = first + ci;
    const int c0 = chunks[3 * chunk + 1], n = chunks[3 * chunk + 2];
    const float* g_w = ws + (int64_t(chunk) * hv + h) * lay.floats;
    const float* g_u = g_w + lay.u;
    const float* g_attn = g_w + lay.attn;
    const float* g_qe = g_w + lay.qe;
    const float* g_kd = g_w + lay.kd;
    const float decay = g_w[lay.decay];
    __syncthreads();
    for (int idx = tid; idx < n * dk; idx += blockDim.x) {
      wc[idx] = g_w[idx];
      qc[idx] = g_qe[idx];
      kc[idx] = g_kd[idx];
    }
    for (int idx = tid; idx < n * kChunk; idx += blockDim.x) at[idx] = g_attn[idx];
    for (int idx = tid; idx < n * cb; idx += blockDim.x) uc[idx] = g_u[(idx / cb) * dv + col0 + idx % cb];
    __syncthreads();
    for (int idx = tid; idx < n * cb; idx += blockDim.x) {
      const int i = idx / cb, c = idx % cb;
      float val = uc[idx];
      for (int r = 0; r < dk; ++r) val -= wc[i * dk + r] * st[r * cb + c];
      vn[idx] = val;
    }
    __syncthreads();
    const int64_t t0 = int64_t(b.q_start[s]) + c0;
    for (int idx = tid; idx < n * cb; idx += blockDim.x) {
      const int i = idx / cb, c = idx % cb;
      float o = 0.f;
      for (int r = 0; r < dk; ++r) o += qc[i * dk + r] * st[r * cb + c];
      for (int j = 0; j <= i; ++j) o += at[i * kChunk + j] * vn[j * cb + c];
      out[((t0 + i) * hv + h) * dv + col0 + c] = f2bf(o);
    }
    __syncthreads();
    for (int idx = tid; idx < dk * cb; idx += blockDim.x) {
      const int r = idx / cb, c = idx % cb;
      float val = st[idx] * decay;
      for (int i = 0; i < n; ++i) val += kc[i * dk + r] * vn[i * cb + c];
      st[idx] = val;
    }
  }
  __syncthreads();
  if (slot >= 0) {
    for (int idx = tid; idx < dk * cb; idx += blockDim.x) {
      stf(state, s32, state0 + int64_t(idx / cb) * dv + col0 + idx % cb, st[idx]);  // BF16: rounded once, here
    }
  }
}

void set_smem(const void* kernel, size_t bytes, int* current) {
  if (int(bytes) <= *current) return;
  allow_shared_memory(kernel, bytes, "gated_delta_rule (these head dims)");
  *current = int(bytes);
}

}  // namespace

void gdn_chunked(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                 const Tensor& state, const ForwardBatch& batch, const DeviceBatch& db,
                 const std::vector<int32_t>& seqs, const Tensor& out) {
  const int hk = int(q.dim(1)), dk = int(q.dim(2)), hv = int(v.dim(1)), dv = int(v.dim(2));
  std::vector<int32_t> chunks, seqinfo;
  for (int32_t s : seqs) {
    seqinfo.push_back(s);
    seqinfo.push_back(int32_t(chunks.size() / 3));
    int count = 0;
    for (int c0 = 0; c0 < batch.seqs[s].q_len; c0 += kChunk) {
      chunks.push_back(s);
      chunks.push_back(c0);
      chunks.push_back(std::min(kChunk, batch.seqs[s].q_len - c0));
      ++count;
    }
    seqinfo.push_back(count);
  }
  const int num_chunks = int(chunks.size() / 3);
  Tensor keep_chunks, keep_info;
  const int32_t* d_chunks = device_ints(chunks, &keep_chunks);
  const int32_t* d_info = device_ints(seqinfo, &keep_info);
  if (gdn_chunked_tc_fits(dk, dv)) {
    Tensor ws = scratch({(gdn_chunked_tc_ws_bytes(num_chunks, hk, hv) + 3) / 4}, DType::kF32);
    gdn_chunked_tc(static_cast<const bf16*>(q.raw()), static_cast<const bf16*>(k.raw()),
                   static_cast<const bf16*>(v.raw()), g.data<float>(), beta.data<float>(), state.raw(), is_f32(state), db,
                   d_chunks, num_chunks, d_info, int(seqs.size()), hk, hv, ws.raw(), static_cast<bf16*>(out.raw()));
    return;
  }
  Tensor ws = scratch({int64_t(num_chunks) * hv * GdnWs(dk, dv).floats}, DType::kF32);
  static int prep_limit = 48 << 10, scan_limit = 48 << 10;
  const size_t prep_bytes = prep_smem(dk, dv);
  set_smem(reinterpret_cast<const void*>(gdn_chunk_prep_kernel), prep_bytes, &prep_limit);
  launch_pdl(gdn_chunk_prep_kernel, dim3(unsigned(num_chunks), unsigned(hv)), 256, prep_bytes, 
      static_cast<const bf16*>(q.raw()), static_cast<const bf16*>(k.raw()), static_cast<const bf16*>(v.raw()),
      g.data<float>(), beta.data<float>(), db, d_chunks, hk, hv, dk, dv, ws.data<float>());
  check_launch("gdn_chunk_prep");
  const int cb = dv % 32 == 0 ? 32 : dv;
  const size_t scan_bytes = scan_smem(dk, cb);
  set_smem(reinterpret_cast<const void*>(gdn_chunk_scan_kernel), scan_bytes, &scan_limit);
  launch_pdl(gdn_chunk_scan_kernel, dim3(unsigned(seqs.size()), unsigned(hv), unsigned(dv / cb)), 256, scan_bytes, ws.data<float>(), d_info, d_chunks, state.raw(), is_f32(state), db, hv, dk, dv, cb,
                                      static_cast<bf16*>(out.raw()));
  check_launch("gdn_chunk_scan");
}

}  // namespace strata::ops::cuda
