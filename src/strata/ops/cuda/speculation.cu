// The draft chain's ops on the GPU (ops.h, "speculative decoding's draft chain"); the CPU op
// checks the shapes before handing off here. A select value out of range copies nothing.
#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

__global__ void spec_accept_kernel(const int32_t* target, const int32_t* drafts, int n, int k, int32_t* accepted) {
  pdl_begin();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int a = 0;
  while (a < k && target[i * (k + 1) + a] == drafts[i * k + a]) ++a;
  accepted[i] = a;
}

// Block i copies row i * stride + select[i] of x (row_bytes each) to row i of out.
__global__ void gather_selected_kernel(const char* x, const int32_t* select, int stride, int64_t row_bytes, char* out) {
  pdl_begin();
  const int i = blockIdx.x;
  const int j = select[i];
  if (j < 0 || j >= stride) return;
  const char* s = x + (int64_t(i) * stride + j) * row_bytes;
  char* d = out + int64_t(i) * row_bytes;
  const bool aligned = ((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d) | row_bytes) & 15) == 0;
  if (aligned) {
    for (int64_t v = threadIdx.x; v < row_bytes / 16; v += blockDim.x) {
      reinterpret_cast<uint4*>(d)[v] = reinterpret_cast<const uint4*>(s)[v];
    }
  } else {
    for (int64_t b = threadIdx.x; b < row_bytes; b += blockDim.x) d[b] = s[b];
  }
}

constexpr int kSelectedCopies = 64;

struct SelectedCopies {
  const char* src[kSelectedCopies];  // slot src + 0 of the copy's pool
  char* dst[kSelectedCopies];
  int64_t bytes[kSelectedCopies];    // the pool's slot size
  int32_t which[kSelectedCopies];    // the copy's select entry
};

// blockIdx.y: the copy; the blocks along x stride over its slot.
__global__ void copy_selected_kernel(SelectedCopies l, const int32_t* select, int limit) {
  pdl_begin();
  const int c = blockIdx.y;
  const int j = select[l.which[c]];
  if (j < 0 || j >= limit) return;
  const int64_t n = l.bytes[c];
  const char* s = l.src[c] + int64_t(j) * n;
  char* d = l.dst[c];
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d) | n) & 15) == 0;
  const int64_t vec = aligned ? n / 16 : 0;
  for (int64_t i = tid; i < vec; i += step) reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
  for (int64_t i = vec * 16 + tid; i < n; i += step) d[i] = s[i];
}

}  // namespace

void spec_accept_greedy(const Tensor& target, const std::vector<int32_t>& drafts, int32_t k, const Tensor& accepted) {
  OpTimer timer_("spec_accept_greedy");
  const int n = int(accepted.numel());
  if (n == 0) return;
  Tensor keep;
  const int32_t* d_drafts = device_ints(drafts, &keep);
  launch_pdl(spec_accept_kernel, unsigned((n + 127) / 128), 128, 0, target.data<int32_t>(), d_drafts, n, int(k),
             accepted.data<int32_t>());
  check_launch("spec_accept_greedy");
}

void gather_rows_selected(const Tensor& x, const Tensor& select, int32_t stride, const Tensor& out) {
  OpTimer timer_("gather_rows_selected");
  if (select.numel() == 0 || x.dim(0) == 0) return;
  const int64_t row = int64_t(x.nbytes()) / x.dim(0);
  launch_pdl(gather_selected_kernel, unsigned(select.numel()), 128, 0, static_cast<const char*>(x.raw()),
             select.data<int32_t>(), int(stride), row, static_cast<char*>(out.raw()));
  check_launch("gather_rows_selected");
}

void copy_slots_selected(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies, const Tensor& select,
                         int32_t limit) {
  OpTimer timer_("copy_slots_selected");
  SelectedCopies l{};
  int n = 0;
  int64_t largest = 0;
  auto launch = [&] {
    if (!n) return;
    const unsigned blocks = unsigned(std::min<int64_t>(64, (largest + 4095) / 4096));
    launch_pdl(copy_selected_kernel, dim3(std::max(1u, blocks), unsigned(n)), 256, 0, l, select.data<int32_t>(),
               int(limit));
    check_launch("copy_slots_selected");
    n = 0;
    largest = 0;
  };
  for (const Tensor& pool : pools) {
    const int64_t row = int64_t(pool.nbytes()) / std::max<int64_t>(pool.dim(0), 1);
    if (row == 0) continue;
    char* base = static_cast<char*>(pool.raw());
    for (size_t i = 0; i < copies.size(); ++i) {
      l.src[n] = base + copies[i].src * row;
      l.dst[n] = base + copies[i].dst * row;
      l.bytes[n] = row;
      l.which[n] = int32_t(i);
      largest = std::max(largest, row);
      if (++n == kSelectedCopies) launch();
    }
  }
  launch();
}

}  // namespace strata::ops::cuda
