#include "strata/ops/cuda/profile.h"

#include <algorithm>
#include <map>

#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

struct Profiler {
  bool on = false;
  int depth = 0;
  std::vector<cudaEvent_t> pool;
  size_t used = 0;
  std::vector<std::string> names;  // names[i] ends at event i + 1

  cudaEvent_t next_event() {
    if (used == pool.size()) {
      cudaEvent_t e = nullptr;
      STRATA_CUDA_CHECK(cudaEventCreate(&e));
      pool.push_back(e);
    }
    return pool[used++];
  }
};

thread_local Profiler t_prof;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void stall_kernel(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

}  // namespace

OpTimer::OpTimer(const char* what, int64_t a, int64_t b) : what_(what), a_(a), b_(b) {
  if (t_prof.on) outer_ = t_prof.depth++ == 0;
}

OpTimer::~OpTimer() {
  if (!t_prof.on) return;
  --t_prof.depth;
  if (!outer_) return;
  std::string name = what_;
  if (a_ || b_) name += " " + std::to_string(a_) + "x" + std::to_string(b_);
  t_prof.names.push_back(std::move(name));
  (void)cudaEventRecord(t_prof.next_event(), stream());
}

void profile_begin() {
  STRATA_CHECK(!capturing(), "profile_begin: not during graph capture");
  t_prof.used = 0;
  t_prof.names.clear();
  t_prof.depth = 0;
  STRATA_CUDA_CHECK(cudaEventRecord(t_prof.next_event(), stream()));
  t_prof.on = true;
}

std::vector<OpTime> profile_end() {
  t_prof.on = false;
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  std::map<std::string, OpTime> by_name;
  for (size_t i = 0; i < t_prof.names.size(); ++i) {
    float ms = 0.f;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, t_prof.pool[i], t_prof.pool[i + 1]));
    OpTime& t = by_name[t_prof.names[i]];
    t.name = t_prof.names[i];
    ++t.calls;
    t.ms += ms;
  }
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& x, const OpTime& y) { return x.ms > y.ms; });
  return out;
}

void stall_stream(double ms) {
  stall_kernel<<<1, 1, 0, stream()>>>(static_cast<unsigned long long>(ms * 1e6));
  check_launch("stall");
}

}  // namespace strata::ops::cuda
