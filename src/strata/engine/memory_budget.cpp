#include "strata/engine/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unistd.h>

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
  return cat("kv cache: ", format_bytes(budget), " budget", source.empty() ? "" : " (" + source + ")", ": ",
             num_blocks, " pages of ", block_size, " tokens (", int64_t(num_blocks) * block_size, " tokens, ",
             format_bytes(bytes_per_block), " per page), ", seq_slots + snapshot_slots, " state slots (", seq_slots,
             " sequences + ", snapshot_slots, " prefix snapshots, ", format_bytes(bytes_per_slot), " per slot)",
             adjustments);
}

namespace {

size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(8) << 30;
}

size_t slot_bytes(const MemoryPlan& p) { return size_t(p.seq_slots + p.snapshot_slots) * p.bytes_per_slot; }

// When the slots and one page do not fit as asked: the snapshot slots are lowered to what fits in
// half the budget beside the sequence slots, then, if those alone do not fit, the sequence slots
// to half the budget.
void fit_slots(MemoryPlan& p, const std::string& budget_flag) {
  if (p.bytes_per_slot == 0 || slot_bytes(p) + p.bytes_per_block <= p.budget) return;
  const int64_t half = int64_t(p.budget / 2 / p.bytes_per_slot);
  const int32_t snapshots = p.snapshot_slots, seqs = p.seq_slots;
  p.snapshot_slots = int32_t(std::clamp<int64_t>(half - p.seq_slots, 0, p.snapshot_slots));
  if (slot_bytes(p) + p.bytes_per_block > p.budget) p.seq_slots = int32_t(std::clamp<int64_t>(half, 1, p.seq_slots));
  STRATA_CHECK(slot_bytes(p) + p.bytes_per_block <= p.budget, budget_flag, " ", format_bytes(p.budget),
               " cannot hold one state slot of ", format_bytes(p.bytes_per_slot), " and one page of ",
               format_bytes(p.bytes_per_block), "; raise --kv-cache-memory");
  if (p.snapshot_slots < snapshots) {
    p.adjustments += cat("; --prefix-state-slots lowered from ", snapshots, " to ", p.snapshot_slots, " to fit");
  }
  if (p.seq_slots < seqs) {
    p.adjustments += cat("; --max-num-seqs ", seqs, " lowered to ", p.seq_slots,
                         " state slots to fit (raise --kv-cache-memory for more)");
  }
}

}  // namespace

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
  const int64_t pages_per_seq = (std::max<int64_t>(r.max_model_len, 1) + r.block_size - 1) / r.block_size;
  std::string budget_flag = "--kv-cache-memory";
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
    budget_flag = cat("the budget from --gpu-memory-utilization ", r.gpu_memory_utilization, ",");
#else
    fail("--gpu-memory-utilization: this build has no CUDA backend");
#endif
  } else {
    // Sized from the model and its context: a few full-length sequences, not a fixed amount.
    const int32_t seqs = std::min(r.max_num_seqs, kCpuDefaultSequences);
    if (p.bytes_per_slot) {
      p.seq_slots = seqs;
      p.snapshot_slots = std::min(p.snapshot_slots, seqs);
    }
    const double full = double(seqs) * double(pages_per_seq) * double(p.bytes_per_block) + double(slot_bytes(p));
    const double cap = double(physical_memory()) / 4;
    p.budget = size_t(std::max(std::min(full, cap), 1.0));
    p.source = cat("CPU default: ", seqs, " sequences of ", r.max_model_len, " tokens",
                   full > cap ? ", at most a quarter of the memory" : "", "; --kv-cache-memory to change");
    budget_flag = "the CPU default KV budget";
    if (p.bytes_per_slot && r.max_num_seqs > seqs) {
      p.adjustments += cat("; --max-num-seqs ", r.max_num_seqs, " runs at most ", seqs,
                           " sequences at once here (give --kv-cache-memory for more)");
    }
  }
  if (p.bytes_per_block == 0) {
    // Pages cost nothing (no paged caches): enough for every sequence at full length.
    p.num_blocks = int32_t(std::min<int64_t>(pages_per_seq * r.max_num_seqs, INT32_MAX));
    fit_slots(p, budget_flag);
    return p;
  }
  fit_slots(p, budget_flag);
  p.num_blocks = int32_t(std::min<size_t>((p.budget - slot_bytes(p)) / p.bytes_per_block, INT32_MAX));
  if (p.num_blocks < pages_per_seq) {
    p.adjustments += cat("; the pages hold less than one sequence of --max-model-len ", r.max_model_len,
                         " tokens: longer requests are refused (raise --kv-cache-memory or lower --max-model-len)");
  }
  return p;
}

}  // namespace strata
