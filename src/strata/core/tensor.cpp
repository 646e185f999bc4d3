#include "strata/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "strata/core/block_copy.h"
#include "strata/core/error.h"

namespace strata {
namespace {

class CpuAllocator final : public Allocator {
 public:
  std::shared_ptr<void> allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!p) fail("out of host memory allocating ", bytes, " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void zero(void* ptr, size_t bytes) override { std::memset(ptr, 0, bytes); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

Allocator& allocator_for(Device d) {
  Allocator* a = g_allocators[int(d)];
  if (!a) fail("no allocator for device ", d == Device::kCuda ? "cuda" : "cpu",
               " (was strata built with CUDA and a GPU found?)");
  return *a;
}

}  // namespace

void set_allocator(Device device, Allocator* allocator) { g_allocators[int(device)] = allocator; }

void Allocator::copy(void* dst, Device, const void* src, Device, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape) STRATA_CHECK(d >= 0, "Tensor::empty: negative dimension in ", shape_str(shape));
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.data_ = allocator_for(device).allocate(t.nbytes());
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  allocator_for(device).zero(t.raw(), t.nbytes());
  return t;
}

Tensor Tensor::view_of(std::shared_ptr<void> owner, void* ptr, Shape shape, DType dtype,
                       Device device) {
  Tensor t;
  t.data_ = std::shared_ptr<void>(std::move(owner), ptr);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      STRATA_CHECK(infer < 0, "reshape: more than one -1 in ", shape_str(shape));
      infer = int(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    STRATA_CHECK(known > 0 && numel() % known == 0, "reshape: cannot view ", describe(), " as ",
                 shape_str(shape));
    shape[infer] = numel() / known;
  }
  STRATA_CHECK(shape_numel(shape) == numel(), "reshape: cannot view ", describe(), " as ",
               shape_str(shape));
  Tensor t = *this;
  if (scale_) {
    STRATA_CHECK(!shape.empty() && shape.back() == shape_.back(), "reshape: ", describe(),
                 " keeps its last dimension (its block scale runs along it), got ", shape_str(shape));
    Shape s(shape.begin(), shape.end() - 1);
    s.push_back(scale_->shape().back());
    t.scale_ = std::make_shared<const Tensor>(scale_->reshape(std::move(s)));
  }
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  STRATA_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
               "rows: [", begin, ", ", end, ") out of range for ", describe());
  size_t row_bytes = size_t(shape_numel(Shape(shape_.begin() + 1, shape_.end()))) * dtype_size(dtype_);
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = std::shared_ptr<void>(data_, static_cast<char*>(data_.get()) + begin * row_bytes);
  if (scale_) t.scale_ = std::make_shared<const Tensor>(scale_->rows(begin, end));
  return t;
}

Tensor Tensor::to_f32() const {
  STRATA_CHECK(device_ == Device::kCpu, "to_f32: tensor is not on the CPU");
  Tensor out = empty(shape_, DType::kF32);
  copy_blocks({dense_block(raw(), dtype_, numel())}, 0, numel(), out.raw(), DType::kF32);
  if (scale_) {
    // code * scale, one float32 multiply (as the checkpoints' dequantisation: io/quant.h).
    const int64_t cols = shape_.back(), rows = cols ? numel() / cols : 0, groups = scale_->shape().back();
    const float* s = scale_->data<float>();
    float* o = out.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) o[r * cols + c] *= s[r * groups + c / scale_group_];
    }
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape_, dtype_, device);
  // The non-CPU side's allocator knows how to move bytes across.
  Allocator& a = allocator_for(device == Device::kCpu ? device_ : device);
  a.copy(out.raw(), device, raw(), device_, nbytes());
  if (scale_) out = out.with_scale(scale_->to(device), scale_group_);
  return out;
}

Tensor Tensor::with_scale(Tensor scale, int group) const {
  STRATA_CHECK(dtype_ == DType::kF8E4M3 && ndim() >= 2, "with_scale: ", describe(),
               " is not an F8_E4M3 matrix or stack of them");
  STRATA_CHECK(group > 0, "with_scale: group ", group);
  Shape want(shape_.begin(), shape_.end() - 1);
  want.push_back((shape_.back() + group - 1) / group);
  STRATA_CHECK(scale.dtype() == DType::kF32 && scale.shape() == want && scale.device() == device_,
               "with_scale: the scale of ", describe(), " per ", group, " columns must be F32", shape_str(want),
               " on its device, got ", scale.describe());
  Tensor t = *this;
  t.scale_ = std::make_shared<const Tensor>(std::move(scale));
  t.scale_group_ = group;
  return t;
}

Tensor Tensor::scale() const { return scale_ ? *scale_ : Tensor(); }

std::string Tensor::describe() const {
  std::string d = cat(dtype_name(dtype_), shape_str(shape_));
  return scale_ ? cat(d, " scaled per ", scale_group_) : d;
}

}  // namespace strata
