// The CUDA backend's runtime, shared by its kernels' host code: error checks, the stream, the
// device allocator (a caching pool for persistent tensors, a per-forward workspace arena), the
// device copy of the current ForwardBatch, and graph-capture state.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/batch.h"
#include "strata/core/error.h"
#include "strata/core/tensor.h"

namespace strata::ops::cuda {

// Throws Error("CUDA error in WHAT: MESSAGE") unless e is cudaSuccess.
void check_cuda(cudaError_t e, const char* what);
#define STRATA_CUDA_CHECK(call) ::strata::ops::cuda::check_cuda((call), #call)
// Checks the launch of `kernel` just queued (cudaGetLastError).
void check_launch(const char* kernel);

cudaStream_t stream();
int sm_count();
// The most dynamic shared memory one block may opt into.
int max_shared_memory();
// Lets `kernel` take `bytes` of dynamic shared memory, after checking that the GPU allows that
// many (the error names `op`).
void allow_shared_memory(const void* kernel, size_t bytes, const char* op);
// True while the calling thread's stream is being captured into a CUDA graph.
bool capturing();

// The device copy of a batch's index arrays. Every count the kernels need at run time is read
// from device memory (so that a captured graph replays any batch of its shape): block tables
// are [num_seqs, *bt_stride]. Padding sequences (graph buckets) have slot -1 and pages -1.
struct DeviceBatch {
  int num_tokens = 0, num_seqs = 0, num_logit_rows = 0;
  int max_q_len = 0;  // host-side facts of this batch, for grid sizes (eager launches only)
  bool all_single_token = false;
  const int32_t* token_ids = nullptr;    // [T]
  const int32_t* positions = nullptr;    // [T]
  const int32_t* token_seq = nullptr;    // [T] sequence of each row
  const int32_t* q_start = nullptr;      // [S]
  const int32_t* q_len = nullptr;        // [S]
  const int32_t* ctx_len = nullptr;      // [S]
  const int32_t* slot = nullptr;         // [S]
  const int32_t* block_table = nullptr;  // [S, *bt_stride]
  const int32_t* bt_stride = nullptr;    // device scalar
  const int32_t* logit_rows = nullptr;   // [N]
};

// The device copy of `batch`: the open ForwardScope's upload when it is that batch, else a
// fresh upload (ops called outside a forward, e.g. by tests; not allowed while capturing).
const DeviceBatch& device_batch(const ForwardBatch& batch);
// Device pointer to `v` when it is one of the current forward batch's arrays (token_ids,
// positions, logit_rows); else a fresh upload kept alive by `keep`.
const int32_t* device_ints(const std::vector<int32_t>& v, Tensor* keep);

// The graph runner's hooks (graphs.cpp): sequences from `first_padding_seq` on are padding.
void set_padding_from(int first_padding_seq);
// Uploads `batch` into the persistent batch buffers without opening a forward, so that a
// graph captured over the same buffers replays it; returns the buffers' generation (it changes
// when they had to grow, which invalidates graphs captured before).
uint64_t upload_batch_for_replay(const ForwardBatch& batch);
uint64_t batch_buffers_generation();

// A workspace tensor (the arena inside a forward, the pool outside).
Tensor scratch(Shape shape, DType dtype);
// A tensor from the persistent pool, also inside a forward.
Tensor persistent(Shape shape, DType dtype);

// Element access helpers for host code.
inline bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }
inline bool is_f32(const Tensor& t) { return t.dtype() == DType::kF32; }
inline int64_t rows_of(const Tensor& t) { return t.ndim() ? t.numel() / t.dim(-1) : 0; }
void expect_cuda(const Tensor& t, const char* op, const char* what);
// A CUDA tensor of dtype BF16 (activations) or F32.
void expect_float(const Tensor& t, const char* op, const char* what);
void expect_dtype(const Tensor& t, DType d, const char* op, const char* what);

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

}  // namespace strata::ops::cuda
