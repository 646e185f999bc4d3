#include "strata/core/block_copy.h"

#include <algorithm>
#include <cstring>

#include "strata/core/error.h"
#include "strata/core/parallel.h"

namespace strata {
namespace {

// Elements per parallel piece: about a megabyte of float32 output, enough to amortise a task and
// small enough to spread a single tensor over every core.
constexpr int64_t kPieceElements = int64_t(1) << 18;

struct Piece {
  const char* src;
  DType dtype;
  int64_t dst;  // element offset in the output
  int64_t n;
};

// The pieces of block b's elements [lo, hi) (block-relative), written from output element `out`.
void add_pieces(const CopyBlock& b, int64_t lo, int64_t hi, int64_t out, std::vector<Piece>& pieces) {
  const bool dense = b.rows == 1 || b.stride == b.cols;
  const int64_t run = dense ? b.elements() : b.cols;  // elements per contiguous run of the source
  const size_t esz = dtype_size(b.dtype);
  for (int64_t at = lo; at < hi;) {
    const int64_t row = at / run, col = at % run;
    const int64_t take = std::min({run - col, hi - at, kPieceElements});
    const int64_t offset = dense ? at : row * b.stride + col;
    pieces.push_back({static_cast<const char*>(b.src) + offset * int64_t(esz), b.dtype, out + (at - lo), take});
    at += take;
  }
}

bool convertible(DType from, DType to) {
  if (from == to) return true;
  if (to == DType::kF32) return from != DType::kF4E2M1;  // packed nibbles need their scales
  return to == DType::kBF16 && (from == DType::kF32 || from == DType::kF16);
}

}  // namespace

int64_t total_elements(const std::vector<CopyBlock>& blocks) {
  int64_t n = 0;
  for (const CopyBlock& b : blocks) n += b.elements();
  return n;
}

void copy_blocks(const std::vector<CopyBlock>& blocks, int64_t first, int64_t count, void* dst, DType dtype) {
  const int64_t total = total_elements(blocks);
  STRATA_CHECK(first >= 0 && count >= 0 && first + count <= total, "copy_blocks: elements [", first, ", ",
               first + count, ") are past the blocks' ", total);
  std::vector<Piece> pieces;
  int64_t base = 0;  // the block's first element in the concatenation
  for (const CopyBlock& b : blocks) {
    STRATA_CHECK(b.rows >= 0 && b.cols >= 0 && (b.rows <= 1 || b.stride >= b.cols) && (b.src || !b.elements()),
                 "copy_blocks: bad block of ", b.rows, " rows of ", b.cols, " elements, stride ", b.stride);
    const int64_t n = b.elements();
    const int64_t lo = std::max(first, base), hi = std::min(first + count, base + n);
    if (lo < hi) {
      // Checked here (only the blocks read): nothing may throw inside the parallel loop.
      STRATA_CHECK(convertible(b.dtype, dtype), "no conversion from ", dtype_name(b.dtype), " to ",
                   dtype_name(dtype));
      add_pieces(b, lo - base, hi - base, lo - first, pieces);
    }
    base += n;
  }
  char* out = static_cast<char*>(dst);
  const size_t out_size = dtype_size(dtype);
  parallel_for(int64_t(pieces.size()), [&](int64_t i) {
    const Piece& p = pieces[size_t(i)];
    convert_elements(p.dtype, p.src, dtype, out + p.dst * int64_t(out_size), size_t(p.n));
  });
}

namespace {

class HostWriter final : public BlockWriter {
 public:
  void write(const Tensor& dst, const std::vector<CopyBlock>& blocks) override {
    STRATA_CHECK(dst.device() == Device::kCpu, "host writer: ", dst.describe(), " is not on the CPU");
    STRATA_CHECK(total_elements(blocks) == dst.numel(), "host writer: ", total_elements(blocks),
                 " elements for ", dst.describe());
    copy_blocks(blocks, 0, dst.numel(), dst.raw(), dst.dtype());
  }
};

}  // namespace

std::unique_ptr<BlockWriter> make_host_writer() { return std::make_unique<HostWriter>(); }

void convert_elements(DType from, const void* src, DType to, void* dst, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  STRATA_CHECK(convertible(from, to), "no conversion from ", dtype_name(from), " to ", dtype_name(to));
  if (to == DType::kF32) {
    to_f32(from, src, static_cast<float*>(dst), n);
    return;
  }
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<uint16_t*>(dst);
  if (from == DType::kF32) {
    for (size_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, s + 4 * i, 4);
      d[i] = f32_to_bf16(f);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    d[i] = f32_to_bf16(f16_to_f32(h));
  }
}

}  // namespace strata
