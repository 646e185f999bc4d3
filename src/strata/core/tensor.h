// Tensor: a dense, row-major block of elements on one device, shared by reference.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/dtype.h"

namespace strata {

enum class Device : uint8_t { kCpu, kCuda };

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// Allocates device memory for Tensor::empty; the CUDA backend registers one for kCuda.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::shared_ptr<void> allocate(size_t bytes) = 0;
  virtual void zero(void* ptr, size_t bytes) = 0;
  // Copies `bytes` from src (on src_device) to dst (on dst_device), one of which is this
  // allocator's device; returns once dst holds the data when dst is host memory.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
};
void set_allocator(Device device, Allocator* allocator);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype, Device device = Device::kCpu);
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::kCpu);
  // A view of memory owned by `owner` (an mmap, another tensor's storage, ...).
  static Tensor view_of(std::shared_ptr<void> owner, void* ptr, Shape shape, DType dtype,
                        Device device = Device::kCpu);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }  // F4_E2M1: half a byte an element

  void* raw() const { return data_.get(); }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_.get());
  }

  // Same storage, new shape with the same element count (one dimension may be -1).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // The same bytes as another dtype and shape of the same byte count (e.g. the U8 bytes a loader
  // filled as the F4_E2M1 codes they pack), sharing storage; block-scaled tensors refuse.
  Tensor view_as(Shape shape, DType dtype) const;
  // A CPU float32 copy (converting from any float or integer type; a block-scaled tensor
  // dequantised, F4_E2M1 by nvfp4_value / mxfp4_value: equal to io/quant.h's dequantisation of
  // the same bytes bit for bit).
  Tensor to_f32() const;
  // A copy on `device` (same dtype and shape, both scale levels too); always a new tensor.
  Tensor to(Device device) const;
  // "BF16[2, 3]", "F8_E4M3[2, 3] scaled per 128", "F4_E2M1[2, 32] scaled per 16 (F8_E4M3, F32 global
  // a row)", "F4_E2M1[2, 64] scaled per 32 (UE8M0)".
  std::string describe() const;

  // A block-scaled weight (routed experts or projections of a quantised checkpoint kept
  // compressed), every row its own scales (so that row slices and concatenations need no
  // alignment), scale [..., rows, cols / group] on the tensor's device. Three kinds:
  // - FP8: F8_E4M3 codes, element [..., r, c] = code * scale[..., r, c / group], scale F32
  //   [..., rows, ceil(cols / group)] (a checkpoint's 128 x 128 blocks expanded by row); no global.
  // - NVFP4: F4_E2M1 codes, group 16, scale F8_E4M3 [..., rows, cols / 16] as stored, global F32
  //   [..., rows] (the tensor's weight_scale_2, a row's own so that gate and up rows may differ):
  //   element = nvfp4_value(code, scale[..., r, c / 16], global[..., r]).
  // - MXFP4: F4_E2M1 codes, group 32, scale UE8M0 [..., rows, cols / 32]; no global:
  //   element = mxfp4_value(code, scale[..., r, c / 32]).
  // Shapes, dtypes and devices are checked (an Error names this tensor and the mismatch); the
  // scale values are not (the loader refuses NaN and negative scales, as io/quant.h does). Both
  // levels go along through rows(), reshape() (which must keep the last dimension; the global
  // takes the new shape without it) and to().
  Tensor with_scale(Tensor scale, int group, Tensor global) const;
  Tensor with_scale(Tensor scale, int group) const;  // no global: FP8, MXFP4
  bool scaled() const { return scale_ != nullptr; }
  Tensor scale() const;         // undefined when not scaled
  Tensor global_scale() const;  // undefined unless NVFP4
  int scale_group() const { return scale_group_; }

 private:
  Tensor f4_to_f32() const;  // to_f32 of a scaled F4_E2M1 tensor

  std::shared_ptr<void> data_;
  std::shared_ptr<const Tensor> scale_;
  std::shared_ptr<const Tensor> global_;  // NVFP4's second level, F32 [..., rows]
  int scale_group_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
};

}  // namespace strata
