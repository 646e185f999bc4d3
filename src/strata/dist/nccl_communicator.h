// dist::Communicator over NCCL, for the GPUs of one host: one thread per GPU in one process,
// each rank's collectives on the CUDA backend's stream of its thread. Bootstrap: one
// NcclUniqueId (made once, by any thread) handed to every rank's constructor.
// Built only when CMake finds NCCL beside the CUDA toolkit (STRATA_WITH_NCCL).
#pragma once

#include <array>

#include "strata/dist/communicator.h"

namespace strata::dist {

using NcclUniqueId = std::array<char, 128>;

// ncclGetUniqueId: the group's rendezvous token (on one host it never leaves the process).
NcclUniqueId nccl_unique_id();

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group as `rank` of `size` (ncclCommInitRank: every rank must call it, each from
  // its own thread, with the GPU it drives current).
  NcclCommunicator(const NcclUniqueId& id, int rank, int size);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // CUDA tensors of F32, BF16 or I32 (sums: F32 or BF16).
  void all_reduce_sum(const Tensor& t) override;
  void all_gather(const Tensor& local, const Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override;
  void all_to_all(const Tensor& in, const Tensor& out) override;

 private:
  void* comm_ = nullptr;  // ncclComm_t
  int rank_, size_;
};

}  // namespace strata::dist
