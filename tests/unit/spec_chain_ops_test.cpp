// The draft chain's ops on the CPU (ops.h, "speculative decoding's draft chain"): results, and a
// clear error for shapes that do not fit and selections out of range.
#include <gtest/gtest.h>

#include <cstring>

#include "strata/core/error.h"
#include "strata/ops/ops.h"

namespace strata::testing {
namespace {

Tensor ints(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::kI32);
  std::memcpy(t.raw(), v.data(), v.size() * 4);
  return t;
}

std::vector<int32_t> values(const Tensor& t) { return {t.data<int32_t>(), t.data<int32_t>() + t.numel()}; }

TEST(SpecChainOps, AcceptanceIsTheLongestMatchingPrefix) {
  // K = 2: picks [t0 t1 t2] a sequence, drafts [d1 d2]; d1 == t0 and d2 == t1 keeps both.
  const Tensor target = ints({5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7});
  Tensor accepted = Tensor::empty({4}, DType::kI32);
  ops::spec_accept_greedy(target, {5, 6, 5, 9, 9, 6, 1, 2}, 2, accepted);
  EXPECT_EQ(values(accepted), (std::vector<int32_t>{2, 1, 0, 0}));
  EXPECT_THROW(ops::spec_accept_greedy(target, {5, 6}, 2, accepted), Error);  // drafts for one sequence
  EXPECT_THROW(ops::spec_accept_greedy(target, {5, 6, 5, 9, 9, 6, 1, 2}, 3, accepted), Error);
}

TEST(SpecChainOps, SelectedRowsAndSlotCopies) {
  Tensor x = Tensor::empty({6, 2}, DType::kF32);
  for (int i = 0; i < 12; ++i) x.data<float>()[i] = float(i);
  Tensor out = Tensor::empty({2, 2}, DType::kF32);
  ops::gather_rows_selected(x, ints({2, 0}), 3, out);  // rows 2 and 3
  EXPECT_EQ(out.data<float>()[0], 4.f);
  EXPECT_EQ(out.data<float>()[2], 6.f);
  EXPECT_THROW(ops::gather_rows_selected(x, ints({3, 0}), 3, out), Error);  // past its group
  EXPECT_THROW(ops::gather_rows_selected(x, ints({0, 0}), 2, out), Error);  // 6 rows are not 2 groups of 2

  Tensor pool = Tensor::empty({8, 3}, DType::kF32);
  for (int i = 0; i < 24; ++i) pool.data<float>()[i] = float(i);
  // Slots 0 and 1 are sequences; each has 3 per-token states from slot 2 + 3 s.
  ops::copy_slots_selected({pool}, {{2, 0}, {5, 1}}, ints({1, 3}), 3);
  EXPECT_EQ(pool.data<float>()[0], 9.f);  // slot 3
  EXPECT_EQ(pool.data<float>()[3], 3.f);  // 3 == limit: every draft kept, untouched
  EXPECT_THROW(ops::copy_slots_selected({pool}, {{2, 0}, {5, 1}}, ints({4, 0}), 3), Error);
  EXPECT_THROW(ops::copy_slots_selected({pool}, {{6, 0}}, ints({0}), 3), Error);  // 6 + 3 slots past the pool
}

}  // namespace
}  // namespace strata::testing
