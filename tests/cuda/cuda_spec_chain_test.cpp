// The draft chain's ops (ops.h, "speculative decoding's draft chain") on the GPU against the CPU:
// acceptance at K = 1 and 3 over 40 sequences (all, none and some drafts kept), a row of each
// group of verify rows (hidden states 2048 wide, as the 35B-A3B shape's; the head's picks, one
// I32), and the rollback's slot copies at a production size (a 32 x 128 x 128 F32 GDN state) and
// at 15 bytes a slot, with some sequences keeping every draft (no copy).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "cuda_test_util.h"
#include "strata/ops/ops.h"

namespace strata::testing {
namespace {

Tensor ints(const std::vector<int32_t>& v, Device d) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::kI32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t.to(d);
}

std::vector<int32_t> host_ints(const Tensor& t) {
  const Tensor h = t.to(Device::kCpu);
  return std::vector<int32_t>(h.data<int32_t>(), h.data<int32_t>() + h.numel());
}

TEST(CudaSpecChain, AcceptanceMatchesTheCpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (int k : {1, 3}) {
    const int n = 40;
    std::vector<int32_t> target(size_t(n) * (k + 1)), drafts(size_t(n) * k);
    for (int i = 0; i < n; ++i) {
      const int keep = i % (k + 1);  // 0 .. k drafts equal the target's picks
      for (int j = 0; j <= k; ++j) target[size_t(i * (k + 1) + j)] = int32_t(rng() % 248320);
      for (int j = 0; j < k; ++j) {
        drafts[size_t(i * k + j)] = j < keep ? target[size_t(i * (k + 1) + j)] : target[size_t(i * (k + 1) + j)] ^ 1;
      }
    }
    Tensor a_cpu = Tensor::empty({n}, DType::kI32), a_gpu = Tensor::empty({n}, DType::kI32, Device::kCuda);
    ops::spec_accept_greedy(ints(target, Device::kCpu), drafts, k, a_cpu);
    ops::spec_accept_greedy(ints(target, Device::kCuda), drafts, k, a_gpu);
    const std::vector<int32_t> want = host_ints(a_cpu);
    EXPECT_EQ(host_ints(a_gpu), want) << "K=" << k;
    for (int i = 0; i < n; ++i) EXPECT_EQ(want[size_t(i)], i % (k + 1)) << "K=" << k << ", sequence " << i;
  }
}

TEST(CudaSpecChain, SelectedRowsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(22);
  const int n = 64, stride = 4;
  std::vector<int32_t> select(n);
  for (int i = 0; i < n; ++i) select[size_t(i)] = int32_t(rng() % stride);
  const Tensor hidden = rand_bf16_values({n * stride, 2048}, rng);
  Tensor out_cpu = Tensor::empty({n, 2048}, DType::kF32);
  ops::gather_rows_selected(hidden, ints(select, Device::kCpu), stride, out_cpu);
  Tensor out_gpu = Tensor::empty({n, 2048}, DType::kF32, Device::kCuda);
  ops::gather_rows_selected(hidden.to(Device::kCuda), ints(select, Device::kCuda), stride, out_gpu);
  const Tensor back = out_gpu.to(Device::kCpu);
  EXPECT_EQ(std::memcmp(back.raw(), out_cpu.raw(), back.nbytes()), 0);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(std::memcmp(static_cast<const char*>(out_cpu.raw()) + i * 8192,
                          static_cast<const char*>(hidden.raw()) + (i * stride + select[size_t(i)]) * 8192, 8192), 0);
  }
  std::vector<int32_t> picks(size_t(n) * stride);
  for (size_t i = 0; i < picks.size(); ++i) picks[i] = int32_t(rng());
  Tensor p_gpu = Tensor::empty({n, 1}, DType::kI32, Device::kCuda);
  ops::gather_rows_selected(ints(picks, Device::kCuda).reshape({n * stride, 1}), ints(select, Device::kCuda), stride,
                            p_gpu);
  const std::vector<int32_t> got = host_ints(p_gpu);
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[size_t(i)], picks[size_t(i * stride + select[size_t(i)])]) << i;
}

TEST(CudaSpecChain, SelectedSlotCopiesMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int seqs = 6, steps = 3, slots = seqs + seqs * steps;
  const std::vector<Shape> shapes = {{slots, 32, 128, 128}, {slots, 15}};
  std::vector<Tensor> host, gpu;
  random_byte_pools(shapes, rng, host, gpu);
  std::vector<ops::SlotCopy> copies;
  std::vector<int32_t> select;
  for (int s = 0; s < seqs; ++s) {
    copies.push_back({seqs + s * steps, s});  // sequence s's per-token states follow the sequence slots
    select.push_back(s % (steps + 1));        // s % 4 == 3: every draft kept, no copy
  }
  const std::vector<Tensor> before = {host[0].to(Device::kCpu), host[1].to(Device::kCpu)};
  ops::copy_slots_selected(host, copies, ints(select, Device::kCpu), steps);
  ops::copy_slots_selected(gpu, copies, ints(select, Device::kCuda), steps);
  for (size_t p = 0; p < shapes.size(); ++p) {
    const Tensor back = gpu[p].to(Device::kCpu);
    EXPECT_EQ(std::memcmp(back.raw(), host[p].raw(), back.nbytes()), 0) << "pool " << p;
    const size_t row = host[p].nbytes() / slots;
    for (int s = 0; s < seqs; ++s) {
      const char* want = static_cast<const char*>(before[p].raw()) +
                         row * size_t(select[size_t(s)] == steps ? s : seqs + s * steps + select[size_t(s)]);
      EXPECT_EQ(std::memcmp(static_cast<const char*>(host[p].raw()) + row * s, want, row), 0)
          << "pool " << p << ", sequence " << s;
    }
  }
}

}  // namespace
}  // namespace strata::testing
