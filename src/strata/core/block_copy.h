// Moving tensor elements between host buffers with exact dtype conversion, spread over the CPU
// cores: how the weight loader turns checkpoint bytes (views of the mapped files) into weights,
// one pass from the mapping to the destination, for whole tensors, row or column slices,
// concatenations and expert stacks alike (models/weights.h; the CUDA upload packs its pinned
// staging buffers with it, ops/cuda/weight_upload.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "strata/core/dtype.h"
#include "strata/core/tensor.h"

namespace strata {

// `rows` rows of `cols` elements of `dtype`, the first at `src`, consecutive rows `stride`
// elements apart (stride == cols: one dense run). Read row by row.
struct CopyBlock {
  const void* src = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 1, cols = 0, stride = 0;
  int64_t elements() const { return rows * cols; }
};

// A whole dense tensor's bytes as one block.
inline CopyBlock dense_block(const void* src, DType dtype, int64_t elements) {
  return CopyBlock{src, dtype, 1, elements, elements};
}

int64_t total_elements(const std::vector<CopyBlock>& blocks);

// Elements [first, first + count) of the blocks read one after another, converted exactly to
// `dtype` (see convert_elements) and written densely from `dst`. Pieces of about a megabyte go to
// the cores in parallel. Throws Error on a range past the blocks' end or a bad block.
void copy_blocks(const std::vector<CopyBlock>& blocks, int64_t first, int64_t count, void* dst, DType dtype);

// n elements of type `from` at src written as `to` at dst: the same type (a copy), any type but
// packed F4_E2M1 to F32, F32 or F16 to BF16 (round to nearest even, as torch). Throws otherwise.
// src may be unaligned; dst must be aligned to `to`'s size.
void convert_elements(DType from, const void* src, DType to, void* dst, size_t n);

// Fills tensors of one device from blocks: the blocks' elements, in order, as the tensor's dtype.
class BlockWriter {
 public:
  virtual ~BlockWriter() = default;
  // dst: a tensor of the writer's device with exactly total_elements(blocks) elements. The source
  // bytes may be released when write returns; a device's copies may still be in flight.
  virtual void write(const Tensor& dst, const std::vector<CopyBlock>& blocks) = 0;
  // Waits for the writes queued so far; throws Error naming a failed one.
  virtual void finish() {}
};

// The CPU's: copy_blocks into the tensor's memory.
std::unique_ptr<BlockWriter> make_host_writer();

}  // namespace strata
