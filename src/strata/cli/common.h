// Helpers shared by the CLI commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/tensor.h"

namespace strata::cli {

// "5,6,7" -> {5, 6, 7}; a clear error naming `flag` on anything else.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);
std::string join_ids(const std::vector<int32_t>& ids);
// `v` with `decimals` digits after the point: fixed(0.12345, 3) == "0.123".
std::string fixed(double v, int decimals);
// "cpu" or "cuda"; an error naming --device otherwise (or when CUDA is not built in).
Device parse_device(const std::string& name);
// The model folder: --model when given, else the bundled default model.
std::string model_dir_or_default(const std::string& flag_value);

}  // namespace strata::cli
