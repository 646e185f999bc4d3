#include "strata/dist/nccl_communicator.h"

#include <nccl.h>

#include <cstring>

#include "strata/core/error.h"
#include "strata/ops/cuda/runtime.h"

namespace strata::dist {
namespace {

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL ", what, " failed: ", ncclGetErrorString(r));
}

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }

ncclDataType_t nccl_dtype(const Tensor& t, const char* op, bool sum) {
  STRATA_CHECK(t.device() == Device::kCuda, op, ": NCCL exchanges CUDA tensors, got ", t.describe());
  switch (t.dtype()) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32:
      if (!sum) return ncclInt32;
      break;
    default: break;
  }
  fail(op, ": NCCL collectives take F32 or BF16 (or I32 to copy), got ", t.describe());
}

}  // namespace

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclUniqueId out{};
  static_assert(sizeof(id) == sizeof(NcclUniqueId), "ncclUniqueId is 128 bytes");
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int size) : rank_(rank), size_(size) {
  STRATA_CHECK(size >= 1 && rank >= 0 && rank < size, "NcclCommunicator: rank ", rank, " of ", size);
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof(nid));
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, nid, rank), "ncclCommInitRank");
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) (void)ncclCommDestroy(as_comm(comm_));
}

void NcclCommunicator::all_reduce_sum(const Tensor& t) {
  const ncclDataType_t dt = nccl_dtype(t, "all_reduce_sum", true);
  check(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), dt, ncclSum, as_comm(comm_), ops::cuda::stream()),
        "ncclAllReduce");
}

void NcclCommunicator::all_gather(const Tensor& local, const Tensor& out) {
  const ncclDataType_t dt = nccl_dtype(local, "all_gather", false);
  STRATA_CHECK(out.dtype() == local.dtype() && out.numel() == local.numel() * size_, "all_gather: out ",
               out.describe(), " for ", size_, " x ", local.describe());
  check(ncclAllGather(local.raw(), out.raw(), size_t(local.numel()), dt, as_comm(comm_), ops::cuda::stream()),
        "ncclAllGather");
}

void NcclCommunicator::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  const ncclDataType_t dt = nccl_dtype(in, "reduce_scatter_sum", true);
  STRATA_CHECK(out.dtype() == in.dtype() && out.numel() * size_ == in.numel(), "reduce_scatter_sum: out ",
               out.describe(), " for ", in.describe(), " over ", size_, " ranks");
  check(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), dt, ncclSum, as_comm(comm_), ops::cuda::stream()),
        "ncclReduceScatter");
}

void NcclCommunicator::all_to_all(const Tensor& in, const Tensor& out) {
  const ncclDataType_t dt = nccl_dtype(in, "all_to_all", false);
  STRATA_CHECK(out.shape() == in.shape() && out.dtype() == in.dtype() && in.dim(0) % size_ == 0,
               "all_to_all: in ", in.describe(), ", out ", out.describe(), " over ", size_, " ranks");
  const size_t count = size_t(in.numel() / size_), bytes = in.nbytes() / size_t(size_);
  check(ncclGroupStart(), "ncclGroupStart");
  for (int j = 0; j < size_; ++j) {
    check(ncclSend(static_cast<const char*>(in.raw()) + size_t(j) * bytes, count, dt, j, as_comm(comm_),
                   ops::cuda::stream()),
          "ncclSend");
    check(ncclRecv(static_cast<char*>(out.raw()) + size_t(j) * bytes, count, dt, j, as_comm(comm_),
                   ops::cuda::stream()),
          "ncclRecv");
  }
  check(ncclGroupEnd(), "ncclGroupEnd");
}

}  // namespace strata::dist
