// NumPy .npy files (version 1.0, little-endian, C order): the logits CLI's output format.
#pragma once

#include <string>
#include <string_view>

#include "strata/core/tensor.h"

namespace strata {

// Writes a CPU tensor as a version 1.0 '<f4' .npy (non-F32 dtypes are converted with to_f32);
// throws Error naming the path on I/O failure.
void write_npy(const std::string& path, const Tensor& t);
// The bytes write_npy would write.
std::string encode_npy(const Tensor& t);

// Reads a '<f4' or '<f8' C-order .npy (versions 1.0, 2.0 and 3.0) into a CPU float32 tensor
// (for tests and tools). Errors name the path and the header field at fault.
Tensor read_npy(const std::string& path);
// Decodes .npy bytes; `origin` starts every error message.
Tensor decode_npy(std::string_view bytes, const std::string& origin);

}  // namespace strata
