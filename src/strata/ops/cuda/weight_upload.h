// Weight upload to the GPU: checkpoint bytes go from the mapped file straight into device
// tensors. Each stretch of blocks is packed by all CPU cores (core/block_copy.h) into one of a
// few pinned staging buffers, as stored, and copied with cudaMemcpyAsync on the backend's stream
// while the cores pack the next buffer; where the tensor's dtype differs from the stored one
// (BF16 matrices from F32 or F16, F32 vectors from BF16 or F16) the bytes land in a device
// staging buffer and a kernel converts them, bit for bit as core/dtype.h does on the host.
#pragma once

#include <memory>

#include "strata/core/block_copy.h"

namespace strata::ops::cuda {

// A BlockWriter for CUDA tensors. Writes are asynchronous: finish() waits for them, then frees the
// staging buffers (the destructor too, ignoring errors).
std::unique_ptr<BlockWriter> make_weight_uploader();

}  // namespace strata::ops::cuda
