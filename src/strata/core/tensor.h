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
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const { return data_.get(); }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_.get());
  }

  // Same storage, new shape with the same element count (one dimension may be -1).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dimension 0, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // A CPU float32 copy (converting from any float or integer type; a block-scaled tensor
  // dequantised).
  Tensor to_f32() const;
  // A copy on `device` (same dtype and shape, the block scale too); always a new tensor.
  Tensor to(Device device) const;
  std::string describe() const;  // "BF16[2, 3]", "F8_E4M3[2, 3] scaled per 128"

  // A block-scaled weight (the routed experts of an FP8 checkpoint kept compressed): F8_E4M3
  // codes whose element [..., r, c] means code * scale[..., r, c / group], with scale F32
  // [..., rows, ceil(cols / group)] on the same device: every row its own scales (a checkpoint's
  // 128 x 128 blocks expanded by row, so that row slices and concatenations need no alignment).
  // The scale goes along through rows(), reshape() (which must keep the last dimension) and to().
  Tensor with_scale(Tensor scale, int group) const;
  bool scaled() const { return scale_ != nullptr; }
  Tensor scale() const;  // undefined when not scaled
  int scale_group() const { return scale_group_; }

 private:
  std::shared_ptr<void> data_;
  std::shared_ptr<const Tensor> scale_;
  int scale_group_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
};

}  // namespace strata
