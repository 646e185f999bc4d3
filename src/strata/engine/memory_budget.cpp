#include "strata/engine/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "strata/core/error.h"

#if defined(STRATA_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace strata {

size_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  std::string suffix = text.substr(i);
  STRATA_CHECK(!number.empty() && number.find('.') == number.rfind('.') && number != ".",
               flag, ": '", text, "' is not a byte size (examples: 1073741824, 512M, 4G)");
  double scale = 1;
  if (!suffix.empty()) {
    const char unit = char(std::toupper(static_cast<unsigned char>(suffix[0])));
    const std::string rest = suffix.substr(1);
    const char* units = "KMGT";
    const char* p = std::strchr(units, unit);
    STRATA_CHECK(unit != 0 && p != nullptr && (rest.empty() || rest == "B" || rest == "iB" || rest == "b"),
                 flag, ": unknown size suffix '", suffix, "' in '", text, "' (use K, M, G or T)");
    scale = std::pow(1024.0, double(p - units + 1));
  }
  const double v = std::stod(number) * scale;
  STRATA_CHECK(v >= 1 && v < 1e18, flag, ": byte size '", text, "' is out of range");
  return size_t(v);
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

std::string MemoryPlan::describe() const {
  return cat("kv cache: ", format_bytes(budget), " budget: ", num_blocks, " pages of ", block_size,
             " tokens (", int64_t(num_blocks) * block_size, " tokens, ", format_bytes(bytes_per_block),
             " per page), ", seq_slots + snapshot_slots, " state slots (", seq_slots,
             " sequences + ", snapshot_slots, " prefix snapshots, ", format_bytes(bytes_per_slot),
             " per slot)");
}

MemoryPlan plan_memory(const CacheSpec& spec, const MemoryRequest& r, Device device) {
  STRATA_CHECK(r.block_size > 0 && r.block_size <= 4096, "--block-size must be in [1, 4096], got ",
               r.block_size);
  STRATA_CHECK(r.max_num_seqs > 0, "--max-num-seqs must be positive, got ", r.max_num_seqs);
  STRATA_CHECK(r.snapshot_slots >= 0, "--prefix-state-slots must be >= 0, got ", r.snapshot_slots);
  STRATA_CHECK(r.gpu_memory_utilization > 0 && r.gpu_memory_utilization <= 1,
               "--gpu-memory-utilization must be in (0, 1], got ", r.gpu_memory_utilization);
  MemoryPlan p;
  p.block_size = r.block_size;
  p.bytes_per_block = spec.bytes_per_block(r.block_size);
  p.bytes_per_slot = spec.bytes_per_slot();
  p.seq_slots = r.max_num_seqs;
  p.snapshot_slots = p.bytes_per_slot ? r.snapshot_slots : 0;  // nothing to snapshot otherwise
  const size_t slot_bytes = size_t(p.seq_slots + p.snapshot_slots) * p.bytes_per_slot;
  const int64_t pages_per_seq = (std::max<int64_t>(r.max_model_len, 1) + r.block_size - 1) / r.block_size;
  if (r.kv_cache_memory) {
    p.budget = *r.kv_cache_memory;
  } else if (device == Device::kCuda) {
#if defined(STRATA_WITH_CUDA)
    size_t free_b = 0, total_b = 0;
    STRATA_CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess, "--gpu-memory-utilization: ",
                 "cannot query the device memory");
    const double want = r.gpu_memory_utilization * double(total_b) - double(total_b - free_b);
    STRATA_CHECK(want > 0, "--gpu-memory-utilization ", r.gpu_memory_utilization, ": ",
                 format_bytes(total_b - free_b), " of ", format_bytes(total_b),
                 " are in use already, nothing is left for the caches");
    p.budget = size_t(want);
#else
    fail("--gpu-memory-utilization: this build has no CUDA backend");
#endif
  } else {
    const double full = double(slot_bytes) +
                        double(pages_per_seq) * double(r.max_num_seqs) * double(p.bytes_per_block);
    p.budget = size_t(std::min(full, double(size_t(1) << 30)));
  }
  if (p.bytes_per_block == 0) {
    // Pages cost nothing (no paged caches): enough for every sequence at full length.
    p.num_blocks = int32_t(std::min<int64_t>(pages_per_seq * r.max_num_seqs, INT32_MAX));
    STRATA_CHECK(p.budget >= slot_bytes, "--kv-cache-memory ", format_bytes(p.budget),
                 " cannot hold the ", p.seq_slots + p.snapshot_slots, " state slots (",
                 format_bytes(p.bytes_per_slot), " each)");
    return p;
  }
  STRATA_CHECK(p.budget >= slot_bytes + p.bytes_per_block, "--kv-cache-memory ",
               format_bytes(p.budget), " cannot hold the ", p.seq_slots + p.snapshot_slots,
               " state slots (", format_bytes(p.bytes_per_slot), " each: --max-num-seqs ",
               p.seq_slots, " + --prefix-state-slots ", p.snapshot_slots, ") and one page of ",
               format_bytes(p.bytes_per_block), "; raise it or lower those flags");
  p.num_blocks = int32_t(std::min<size_t>((p.budget - slot_bytes) / p.bytes_per_block, INT32_MAX));
  return p;
}

}  // namespace strata
