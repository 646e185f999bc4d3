// Tensor and expert parallelism behind the plain Model contract, so that the one engine (its
// scheduler, sampler and cache manager on the calling thread, rank 0) runs a sharded model:
// `size` rank models, each loaded with its shard (LoadOptions.parallel), ranks 1..size-1 on
// worker threads of their own, exchanging activations through a dist::LocalGroup.
//
// forward(batch, caches, logits) hands the batch to every rank: rank 0 runs it over `caches`,
// rank r over caches.peers[r - 1] (allocate_caches makes them, same block and slot counts from
// rank r's own cache spec), and the logits returned are rank 0's (the ranks all-gather the
// vocabulary, so every rank holds the same bits). Cache operations outside forward go through
// Caches::copy_slot / copy_page, which reach the peers.
//
// A failure on one rank aborts the group (the others' collectives fail instead of waiting) and
// leaves the model unusable: later forwards fail naming the first error.
#pragma once

#include <memory>
#include <string>

#include "strata/models/model.h"

namespace strata {

struct ParallelOptions {
  int tensor_parallel_size = 1;  // --tensor-parallel-size
  bool expert_parallel = false;  // --enable-expert-parallel (dist::Parallel says what it means)
};

// The model of `dir` split over options.tensor_parallel_size ranks (load_model itself at 1).
// The CPU only: the CUDA backend is one process-wide device, so CUDA with more than one rank is
// refused naming --tensor-parallel-size.
std::unique_ptr<Model> load_parallel_model(const std::string& dir, const LoadOptions& load,
                                           const ParallelOptions& options);

}  // namespace strata
