// TMA tensor maps (the descriptors of Hopper's bulk tensor copies, cp.async.bulk.tensor), encoded
// on the host through the driver's cuTensorMapEncodeTiled, found at run time so that nothing
// links libcuda. A map is passed to a kernel by value as a __grid_constant__ parameter.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace strata::ops::cuda {

// A bf16 tensor of `rank` (1-5) dimensions, innermost first: dims[i] elements, the byte stride
// of dimension i + 1 in strides[i] (multiples of 16), copied in boxes of box[i] elements (the
// inner box 16-byte multiple, at most 128 bytes with the 128-byte swizzle; each at most 256).
// Elements outside the dims read as zero. swizzle128: the 128-byte swizzle of wgmma.cuh.
CUtensorMap tensor_map_bf16(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                            const uint32_t* box, bool swizzle128);
// The same over bytes (FP8 codes): dims and boxes in bytes.
CUtensorMap tensor_map_u8(const void* base, int rank, const uint64_t* dims, const uint64_t* strides,
                          const uint32_t* box, bool swizzle128);

}  // namespace strata::ops::cuda
