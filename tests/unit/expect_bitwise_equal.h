// A test's check that two CPU F32 tensors are equal bit for bit (same shape, same bytes): kept
// quantised weights against their dequantised load, ops on them against ops on their floats.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "strata/core/tensor.h"

namespace strata {

inline void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), DType::kF32) << what;
  ASSERT_EQ(b.dtype(), DType::kF32) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

}  // namespace strata
