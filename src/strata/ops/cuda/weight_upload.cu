#include "strata/ops/cuda/weight_upload.h"

#include <algorithm>

#include "strata/ops/cuda/common.cuh"
#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

// Bit for bit core/dtype.h's f32_to_bf16: round to nearest even, NaN stays (quiet) NaN.
__device__ __forceinline__ uint16_t f32_bits_to_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Bit for bit core/dtype.h's f16_to_f32 (exact; a NaN becomes the quiet NaN with its sign).
__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) {
    mag = float(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
  } else if (exp == 31) {
    mag = __uint_as_float(man ? 0x7fc00000u : 0x7f800000u);
  } else {
    mag = __uint_as_float(((exp + 112) << 23) | (man << 13));
  }
  return __uint_as_float(__float_as_uint(mag) | sign);
}

// dst[i] = src[i] converted: from F32, BF16 or F16 to BF16 or F32 (the two never equal).
__global__ void convert_kernel(const void* src, DType from, void* dst, DType to, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t bits;
    if (from == DType::kF32) {
      bits = static_cast<const uint32_t*>(src)[i];
    } else if (from == DType::kBF16) {
      bits = uint32_t(static_cast<const uint16_t*>(src)[i]) << 16;
    } else {
      bits = __float_as_uint(f16_bits_to_f32(static_cast<const uint16_t*>(src)[i]));
    }
    if (to == DType::kBF16) {
      static_cast<uint16_t*>(dst)[i] = f32_bits_to_bf16(bits);
    } else {
      static_cast<uint32_t*>(dst)[i] = bits;
    }
  }
}

bool device_convertible(DType from, DType to) {
  const bool float_from = from == DType::kF32 || from == DType::kBF16 || from == DType::kF16;
  return from == to || (float_from && (to == DType::kBF16 || to == DType::kF32));
}

class WeightUploader final : public BlockWriter {
 public:
  ~WeightUploader() override {
    try {
      finish();
    } catch (const std::exception&) {  // a failed load's error is already on its way
    }
  }

  void write(const Tensor& dst, const std::vector<CopyBlock>& blocks) override {
    STRATA_CHECK(dst.device() == Device::kCuda, "weight upload: ", dst.describe(), " is not on the GPU");
    STRATA_CHECK(total_elements(blocks) == dst.numel(), "weight upload: ", total_elements(blocks),
                 " elements for ", dst.describe());
    for (const CopyBlock& b : blocks) {
      STRATA_CHECK(device_convertible(b.dtype, dst.dtype()), "weight upload: no conversion from ",
                   dtype_name(b.dtype), " to ", dtype_name(dst.dtype()));
    }
    // Consecutive blocks of one stored dtype are staged together.
    int64_t first = 0;
    for (size_t b = 0; b < blocks.size();) {
      size_t e = b;
      int64_t n = 0;
      for (; e < blocks.size() && blocks[e].dtype == blocks[b].dtype; ++e) n += blocks[e].elements();
      upload(dst, blocks, first, n, blocks[b].dtype);
      first += n;
      b = e;
    }
  }

  void finish() override {
    if (!allocated_) return;
    allocated_ = false;
    const cudaError_t synced = cudaStreamSynchronize(stream());
    for (Staging& s : staging_) {
      if (s.free) (void)cudaEventDestroy(s.free);
      if (s.host) (void)cudaFreeHost(s.host);
      if (s.device) (void)cudaFree(s.device);
      s = Staging{};
    }
    check_cuda(synced, "the weight upload (cudaStreamSynchronize)");
  }

 private:
  static constexpr size_t kStagingBytes = size_t(64) << 20;
  static constexpr int kStagingBuffers = 4;  // the cores fill one while the copy engine drains others

  struct Staging {
    void* host = nullptr;    // pinned
    void* device = nullptr;  // the stored bytes before a conversion (allocated on first need)
    cudaEvent_t free = nullptr;
  };

  void allocate() {
    allocated_ = true;  // finish() frees what a failed allocation left
    for (Staging& s : staging_) {
      STRATA_CUDA_CHECK(cudaHostAlloc(&s.host, kStagingBytes, cudaHostAllocDefault));
      STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming));
    }
  }

  // Elements [first, first + n) of the blocks, all stored as `from`, into dst from element first.
  void upload(const Tensor& dst, const std::vector<CopyBlock>& blocks, int64_t first, int64_t n, DType from) {
    if (!allocated_) allocate();
    const int64_t chunk = int64_t(kStagingBytes / dtype_size(from));
    for (int64_t at = first; at < first + n; at += chunk) {
      const int64_t count = std::min(chunk, first + n - at);
      Staging& s = staging_[next_];
      next_ = (next_ + 1) % kStagingBuffers;
      STRATA_CUDA_CHECK(cudaEventSynchronize(s.free));  // its previous copy is done
      copy_blocks(blocks, at, count, s.host, from);
      char* out = static_cast<char*>(dst.raw()) + at * int64_t(dtype_size(dst.dtype()));
      const size_t bytes = size_t(count) * dtype_size(from);
      if (from == dst.dtype()) {
        STRATA_CUDA_CHECK(cudaMemcpyAsync(out, s.host, bytes, cudaMemcpyHostToDevice, stream()));
      } else {
        if (!s.device) STRATA_CUDA_CHECK(cudaMalloc(&s.device, kStagingBytes));
        STRATA_CUDA_CHECK(cudaMemcpyAsync(s.device, s.host, bytes, cudaMemcpyHostToDevice, stream()));
        const unsigned grid = unsigned(std::min<int64_t>((count + 255) / 256, int64_t(sm_count()) * 8));
        launch_pdl(convert_kernel, grid, 256, 0, static_cast<const void*>(s.device), from, static_cast<void*>(out),
                   dst.dtype(), count);
        check_launch("convert_kernel (weight upload)");
      }
      STRATA_CUDA_CHECK(cudaEventRecord(s.free, stream()));
    }
  }

  Staging staging_[kStagingBuffers];
  int next_ = 0;
  bool allocated_ = false;
};

}  // namespace

std::unique_ptr<BlockWriter> make_weight_uploader() { return std::make_unique<WeightUploader>(); }

}  // namespace strata::ops::cuda
