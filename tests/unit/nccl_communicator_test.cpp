// The NCCL communicator (built when the CUDA toolkit ships NCCL). One GPU here: a group of one
// rank, whose collectives are copies; the multi-GPU runs need a multi-GPU machine.
#if defined(STRATA_WITH_NCCL)

#include <gtest/gtest.h>

#include "../cuda/cuda_test_util.h"
#include "strata/dist/nccl_communicator.h"

namespace strata::testing {
namespace {

TEST(NcclCommunicator, OneRankGroupCopiesAndRefusesHostTensors) {
  STRATA_REQUIRE_GPU();
  dist::NcclCommunicator c(dist::nccl_unique_id(), 0, 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  Tensor host = Tensor::empty({4, 3}, DType::kF32);
  for (int i = 0; i < 12; ++i) host.data<float>()[i] = float(i) - 5.5f;
  Tensor a = host.to(Device::kCuda), b = Tensor::empty({4, 3}, DType::kF32, Device::kCuda);
  c.all_reduce_sum(a);
  c.all_gather(a, b);
  Tensor back = b.to(Device::kCpu);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back.data<float>()[i], host.data<float>()[i]) << i;
  c.all_to_all(a, b);
  c.reduce_scatter_sum(b, a);
  back = a.to(Device::kCpu);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(back.data<float>()[i], host.data<float>()[i]) << i;
  EXPECT_THROW(c.all_reduce_sum(host), Error);
}

}  // namespace
}  // namespace strata::testing

#endif  // STRATA_WITH_NCCL
