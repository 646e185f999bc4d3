// CPU reference: the draft chain's ops (ops.h, "speculative decoding's draft chain").
#include <cstring>

#include "strata/core/error.h"
#include "strata/ops/cuda/dispatch.h"
#include "strata/ops/ops.h"

namespace strata::ops {
namespace {

// The checks run before the hand-off to the CUDA backend, so they hold for both devices.
void check_spec_accept(const Tensor& target, const std::vector<int32_t>& drafts, int32_t k, const Tensor& accepted) {
  STRATA_CHECK(k >= 1 && target.dtype() == DType::kI32 && accepted.dtype() == DType::kI32 &&
                   target.device() == accepted.device() && target.numel() == accepted.numel() * (k + 1) &&
                   int64_t(drafts.size()) == accepted.numel() * k,
               "spec_accept_greedy: target ", target.describe(), ", ", drafts.size(), " drafts, k ", k, ", accepted ",
               accepted.describe());
}

void check_rows_selected(const Tensor& x, const Tensor& select, int32_t stride, const Tensor& out) {
  STRATA_CHECK(stride >= 1 && x.ndim() >= 1 && select.dtype() == DType::kI32 && select.ndim() == 1 &&
                   x.device() == select.device() && x.device() == out.device() && x.dtype() == out.dtype() &&
                   x.dim(0) == select.numel() * stride && out.ndim() >= 1 && out.dim(0) == select.numel() &&
                   (x.dim(0) == 0 || out.nbytes() / size_t(out.dim(0)) == x.nbytes() / size_t(x.dim(0))),
               "gather_rows_selected: x ", x.describe(), ", select ", select.describe(), ", stride ", stride, ", out ",
               out.describe());
}

void check_slots_selected(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies, const Tensor& select,
                          int32_t limit) {
  STRATA_CHECK(select.dtype() == DType::kI32 && select.numel() == int64_t(copies.size()) && limit >= 0,
               "copy_slots_selected: select ", select.describe(), " for ", copies.size(), " copies, limit ", limit);
  for (const Tensor& pool : pools) {
    STRATA_CHECK(pool.device() == select.device() && pool.ndim() >= 1, "copy_slots_selected: pool ", pool.describe(),
                 ", select ", select.describe());
    for (const SlotCopy& c : copies) {
      STRATA_CHECK(c.src >= 0 && c.dst >= 0 && c.src + int64_t(limit) <= pool.dim(0) && c.dst < pool.dim(0),
                   "copy_slots_selected: slots ", c.src, " + [0, ", limit, ") -> ", c.dst, " out of range for pool ",
                   pool.describe());
    }
  }
}

}  // namespace

void spec_accept_greedy(const Tensor& target, const std::vector<int32_t>& drafts, int32_t k, const Tensor& accepted) {
  check_spec_accept(target, drafts, k, accepted);
  STRATA_CUDA_DISPATCH(target, spec_accept_greedy(target, drafts, k, accepted));
  const int32_t* t = target.data<int32_t>();
  for (int64_t i = 0; i < accepted.numel(); ++i) {
    int32_t a = 0;
    while (a < k && t[i * (k + 1) + a] == drafts[size_t(i * k + a)]) ++a;
    accepted.data<int32_t>()[i] = a;
  }
}

void gather_rows_selected(const Tensor& x, const Tensor& select, int32_t stride, const Tensor& out) {
  check_rows_selected(x, select, stride, out);
  STRATA_CUDA_DISPATCH(x, gather_rows_selected(x, select, stride, out));
  if (x.dim(0) == 0) return;
  const size_t row = x.nbytes() / size_t(x.dim(0));
  for (int64_t i = 0; i < select.numel(); ++i) {
    const int32_t j = select.data<int32_t>()[i];
    STRATA_CHECK(j >= 0 && j < stride, "gather_rows_selected: select[", i, "] = ", j, " outside [0, ", stride, ")");
    std::memcpy(static_cast<char*>(out.raw()) + size_t(i) * row,
                static_cast<const char*>(x.raw()) + size_t(i * stride + j) * row, row);
  }
}

void copy_slots_selected(const std::vector<Tensor>& pools, const std::vector<SlotCopy>& copies, const Tensor& select,
                         int32_t limit) {
  if (pools.empty() || copies.empty()) return;
  check_slots_selected(pools, copies, select, limit);
  STRATA_CUDA_DISPATCH(select, copy_slots_selected(pools, copies, select, limit));
  for (size_t i = 0; i < copies.size(); ++i) {
    const int32_t j = select.data<int32_t>()[i];
    STRATA_CHECK(j >= 0 && j <= limit, "copy_slots_selected: select[", i, "] = ", j, " outside [0, ", limit, "]");
    if (j == limit) continue;
    for (const Tensor& pool : pools) copy_slot(pool, copies[i].src + j, copies[i].dst);
  }
}

}  // namespace strata::ops
