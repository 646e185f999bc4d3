#include "strata/ops/cuda/tensor_map.h"

#include <cudaTypedefs.h>

#include "strata/ops/cuda/runtime.h"

namespace strata::ops::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    STRATA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    STRATA_CHECK(found == cudaDriverEntryPointSuccess && p, "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

CUtensorMap encode(CUtensorMapDataType type, const char* what, const void* base, int rank, const uint64_t* dims,
                   const uint64_t* strides, const uint32_t* box, bool swizzle128) {
  STRATA_CHECK(rank >= 1 && rank <= 5, "tensor map: rank ", rank);
  CUtensorMap map;
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], one[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    one[i] = 1;
    if (i + 1 < rank) s[i] = strides[i];
  }
  const CUresult r = encode_tiled()(&map, type, cuuint32_t(rank), const_cast<void*>(base), d, s, b, one,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  STRATA_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (error ", int(r), ") for a rank-", rank, " ", what,
               " tensor, inner dim ", dims[0], ", box ", box[0], " x ", rank > 1 ? box[1] : 1);
  return map;
}

}  // namespace

CUtensorMap tensor_map_bf16(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                            const uint32_t* box, bool swizzle128) {
  return encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, "bf16", base, rank, dims, strides, box, swizzle128);
}

CUtensorMap tensor_map_u8(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                          const uint32_t* box, bool swizzle128) {
  return encode(CU_TENSOR_MAP_DATA_TYPE_UINT8, "byte", base, rank, dims, strides, box, swizzle128);
}

}  // namespace strata::ops::cuda
