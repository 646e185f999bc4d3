// NumPy .npy files (version 1.0, little-endian, C order): the logits CLI's output format.
#pragma once

#include <string>

#include "strata/core/tensor.h"

namespace strata {

// Writes a CPU float32 tensor as .npy; throws Error naming the path on I/O failure.
void write_npy(const std::string& path, const Tensor& t);
// Reads a float32 or float64 .npy into a CPU float32 tensor (for tests and tools).
Tensor read_npy(const std::string& path);

}  // namespace strata
