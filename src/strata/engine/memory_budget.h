// Sizing the cache pools from one memory budget.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "strata/core/tensor.h"
#include "strata/models/model.h"

namespace strata {

// "4096", "512M", "4G", "1.5GiB": a byte count with an optional binary suffix (K, M, G, T,
// optionally followed by "B" or "iB"; 1K = 1024). Throws Error naming `flag` otherwise.
size_t parse_byte_size(const std::string& text, const std::string& flag);
std::string format_bytes(size_t bytes);  // "1.50 GiB"

struct MemoryPlan {
  size_t budget = 0;           // bytes for all cache pools
  size_t bytes_per_block = 0;  // all paged tensors of all layers, one page
  size_t bytes_per_slot = 0;   // all slot tensors of all layers, one slot
  int32_t num_blocks = 0;
  int32_t seq_slots = 0;       // = max_num_seqs
  int32_t snapshot_slots = 0;
  int32_t block_size = 16;
  std::string source;       // where the budget came from ("--kv-cache-memory", "CPU default: ...")
  std::string adjustments;  // flags lowered to fit the budget, and what the budget cannot hold
  std::string describe() const;  // the capacity line logged at start-up
};

// Sequences the CPU default budget holds at full length (pages, state slot and snapshot slot).
constexpr int32_t kCpuDefaultSequences = 8;

struct MemoryRequest {
  std::optional<size_t> kv_cache_memory;  // bytes; wins when set
  double gpu_memory_utilization = 0.9;    // (0, 1]: on CUDA, of the device's total memory
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;
  int32_t snapshot_slots = 0;
  int64_t max_model_len = 0;  // to size pages that cost nothing (models without paged caches)
};

// The budget is --kv-cache-memory when given; on CUDA otherwise gpu_memory_utilization of the
// device's total memory minus what is in use now (weights loaded, the CUDA graphs' shared logits
// buffer, and the workspace of the engine's start-up step, Engine::warm_up); on the CPU otherwise what
// min(max_num_seqs, kCpuDefaultSequences) sequences of max_model_len tokens need (their pages,
// a state slot each and as many snapshot slots), at most a quarter of the physical memory.
// State slots (max_num_seqs + snapshot slots) are taken first, the rest becomes pages. When the
// slots and one page do not fit, the snapshot slots are lowered to what fits in half the budget
// beside the sequence slots, and when those alone still do not fit, the sequence slots to half
// the budget (the scheduler then runs at most that many sequences: admission needs a slot);
// `adjustments` says so, and names the flag to change when the pool holds less than one
// full-length sequence. Throws Error naming --kv-cache-memory when not even one slot and one
// page fit.
MemoryPlan plan_memory(const CacheSpec& spec, const MemoryRequest& request, Device device);

}  // namespace strata
