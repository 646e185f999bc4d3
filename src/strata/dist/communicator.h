// Collectives between the ranks of a tensor- or expert-parallel group. One rank per GPU; the
// model calls them at its shard boundaries (row-parallel projections, the vocabulary split of
// lm_head). Two implementations: LocalGroup, ranks as threads of one process exchanging host
// tensors (the CPU reference, and what the partition tests run), and NcclCommunicator
// (dist/nccl_communicator.h) over NCCL on the backend's stream.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "strata/core/tensor.h"

namespace strata::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's t summed element-wise into every rank's t (same shape and dtype on all ranks).
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // out [size * n, ...] = the ranks' `local` [n, ...] stacked along dimension 0 in rank order.
  virtual void all_gather(const Tensor& local, const Tensor& out) = 0;
  // out [n, ...] = rank r's slice [r n, (r + 1) n) of the element-wise sum of the ranks' `in`.
  virtual void reduce_scatter_sum(const Tensor& in, const Tensor& out) = 0;
  // in and out [size * n, ...]: out's slice j = rank j's slice `rank()` of its `in`.
  virtual void all_to_all(const Tensor& in, const Tensor& out) = 0;
};

// The ranks of one parallel group in this process, one thread each; host (CPU) tensors of F32,
// BF16 or I32. Every collective is a barrier; sums run in rank order, so every rank gets the
// same bits. The host reference for the sharding math, not a transport between GPUs.
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  ~LocalGroup();
  LocalGroup(const LocalGroup&) = delete;
  LocalGroup& operator=(const LocalGroup&) = delete;
  // Rank r's communicator (owned by the group; use it from rank r's thread only).
  Communicator& rank(int r);
  int size() const;
  // Fails every collective in progress or to come on every rank (an Error naming `reason`): a
  // rank that failed calls it so that the others do not wait for it forever.
  void abort(const std::string& reason);

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

// lm_head split over the vocabulary: logits [n, vocab] = every rank's column block `mine`
// [n, vocab / size], rank r's at columns [r vocab / size, (r + 1) vocab / size). CPU F32.
void gather_vocab(Communicator& comm, const Tensor& mine, const Tensor& logits);

// Which shard of a model a rank holds: heads, intermediate columns, experts and the vocabulary
// split `size` ways, rank `rank` of them. comm is null only when size is 1. The routed experts
// are split as vLLM does: by default each expert is tensor-parallel (its intermediate columns
// split over the ranks, every rank holding every expert); with expert_parallel
// (--enable-expert-parallel) whole experts are spread over the ranks.
struct Parallel {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;
  bool expert_parallel = false;
};

}  // namespace strata::dist
