#include "strata/cli/common.h"

#include <cstdio>
#include <filesystem>

#include "strata/core/error.h"

namespace strata::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    STRATA_CHECK(!item.empty() && item.size() <= 10 &&
                     item.find_first_not_of("0123456789") == std::string::npos,
                 flag, ": '", item, "' is not a token id (expected comma-separated integers)");
    const long long v = std::stoll(item);
    STRATA_CHECK(v <= INT32_MAX, flag, ": token id ", item, " is too large");
    ids.push_back(int32_t(v));
    i = j + 1;
  }
  STRATA_CHECK(!ids.empty(), flag, ": no token ids given");
  return ids;
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") {
#if defined(STRATA_WITH_CUDA)
    return Device::kCuda;
#else
    fail("--device cuda: this build of strata has no CUDA backend (nvcc was not found at build time)");
#endif
  }
  fail("--device: expected cpu or cuda, got '", name, "'");
}

std::string model_dir_or_default(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const std::filesystem::path bundled = std::filesystem::path(STRATA_SOURCE_DIR) / "models" / "default";
  if (std::filesystem::exists(bundled / "config.json")) return bundled.string();
  const std::filesystem::path fixture =
      std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "fixtures" / "qwen3_5_moe_tiny";
  if (std::filesystem::exists(fixture / "config.json")) return fixture.string();
  fail("--model: no model folder given and no bundled default model found");
}

}  // namespace strata::cli
