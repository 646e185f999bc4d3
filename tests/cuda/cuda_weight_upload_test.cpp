// The CUDA weight upload (ops/cuda/weight_upload.h): what lands on the GPU is, bit for bit, the
// host's conversion of the stored bytes, through the staging chunks and the conversion kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "cuda_test_util.h"
#include "strata/io/checkpoint.h"
#include "strata/io/safetensors.h"
#include "strata/models/weights.h"

namespace fs = std::filesystem;

namespace strata::testing {
namespace {

// A CPU tensor of `dtype` whose elements are the bits `bits(i)` (F32: 32 bits, else 16).
template <class F>
Tensor tensor_of_bits(Shape shape, DType dtype, F bits) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF32) {
      t.data<uint32_t>()[i] = uint32_t(bits(i));
    } else {
      t.data<uint16_t>()[i] = uint16_t(bits(i));
    }
  }
  return t;
}

// The host's conversion of stored element i to the GPU weight's dtype, as bits.
uint32_t host_bits(const Tensor& stored, int64_t i, DType to) {
  if (stored.dtype() == to) {  // stored as used: the bits themselves (NaN payloads included)
    return to == DType::kF32 ? stored.data<uint32_t>()[i] : stored.data<uint16_t>()[i];
  }
  float f = 0;
  if (stored.dtype() == DType::kF32) f = stored.data<float>()[i];
  if (stored.dtype() == DType::kBF16) f = bf16_to_f32(stored.data<uint16_t>()[i]);
  if (stored.dtype() == DType::kF16) f = f16_to_f32(stored.data<uint16_t>()[i]);
  if (to == DType::kBF16) return f32_to_bf16(f);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

uint32_t device_bits(const Tensor& host_copy, int64_t i) {
  return host_copy.dtype() == DType::kF32 ? host_copy.data<uint32_t>()[i] : host_copy.data<uint16_t>()[i];
}

TEST(CudaWeightUpload, EveryStoredDtypeLandsAsTheHostConvertsIt) {
  STRATA_REQUIRE_GPU();
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("strata_upload_" + std::to_string(rd()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  std::mt19937 rng(3);
  // Random bit patterns cover NaNs, infinities, subnormals and rounding ties of every kind.
  auto random_bits = [&](int64_t) { return rng(); };
  const std::vector<std::pair<std::string, Tensor>> stored = {
      {"f32_matrix", tensor_of_bits({300, 70}, DType::kF32, random_bits)},
      {"f16_matrix", tensor_of_bits({40, 50}, DType::kF16, random_bits)},
      {"bf16_matrix", tensor_of_bits({64, 100}, DType::kBF16, random_bits)},
      {"f16_vector", tensor_of_bits({1000}, DType::kF16, [](int64_t i) { return i * 65; })},
      {"bf16_vector", tensor_of_bits({777}, DType::kBF16, random_bits)},
      {"f32_vector", tensor_of_bits({513}, DType::kF32, random_bits)},
      // Over one 64 MB staging chunk, with and without a conversion.
      {"big_bf16", tensor_of_bits({8192, 4608}, DType::kBF16, random_bits)},
      {"big_f32", tensor_of_bits({5000, 4000}, DType::kF32, random_bits)},
  };
  write_safetensors((dir / "model.safetensors").string(), stored);
  {
    const Checkpoint ckpt = Checkpoint::open(dir.string());
    WeightLoader w(ckpt, "", Device::kCuda);
    std::vector<std::pair<Tensor, Tensor>> loaded;  // (GPU weight, stored)
    for (const auto& [name, t] : stored) loaded.emplace_back(w.get_top(name, t.shape()), t);
    // Column slices of a converted and an unconverted matrix, stacked.
    const Tensor sliced = w.get_slices({{"f16_matrix", {40, 50}, 1, 7, 30}, {"f32_matrix", {300, 70}, 1, 11, 30}});
    w.finish();
    for (const auto& [gpu, t] : loaded) {
      ASSERT_EQ(gpu.device(), Device::kCuda);
      ASSERT_EQ(gpu.dtype(), t.ndim() >= 2 ? DType::kBF16 : DType::kF32) << t.describe();
      const Tensor back = gpu.to(Device::kCpu);
      for (int64_t i = 0; i < t.numel(); ++i) {
        ASSERT_EQ(device_bits(back, i), host_bits(t, i, gpu.dtype())) << t.describe() << " element " << i;
      }
    }
    const Tensor back = sliced.to(Device::kCpu);
    ASSERT_EQ(back.shape(), (Shape{340, 30}));
    for (int64_t r = 0; r < 340; ++r) {
      const Tensor& t = r < 40 ? stored[1].second : stored[0].second;
      const int64_t row = r < 40 ? r : r - 40, cols = r < 40 ? 50 : 70, c0 = r < 40 ? 7 : 11;
      for (int64_t c = 0; c < 30; ++c) {
        ASSERT_EQ(device_bits(back, r * 30 + c), host_bits(t, row * cols + c0 + c, DType::kBF16)) << r << ", " << c;
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata::testing
