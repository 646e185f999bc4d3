#include <cstring>

#include "strata/core/error.h"
#include "strata/dist/communicator.h"

namespace strata::dist {

void gather_vocab(Communicator& comm, const Tensor& mine, const Tensor& logits) {
  const int size = comm.size();
  STRATA_CHECK(mine.ndim() == 2 && logits.ndim() == 2 && mine.dtype() == DType::kF32 &&
                   logits.dtype() == DType::kF32 && mine.device() == Device::kCpu &&
                   logits.device() == Device::kCpu && logits.dim(0) == mine.dim(0) &&
                   logits.dim(1) == mine.dim(1) * size,
               "gather_vocab: ", size, " ranks of ", mine.describe(), " into ", logits.describe());
  const int64_t n = mine.dim(0), part = mine.dim(1), vocab = logits.dim(1);
  Tensor all = Tensor::empty({size * n, part}, DType::kF32);
  comm.all_gather(mine, all);
  for (int r = 0; r < size; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(logits.data<float>() + i * vocab + r * part, all.data<float>() + (r * n + i) * part,
                  size_t(part) * sizeof(float));
    }
  }
}

}  // namespace strata::dist
