#include "strata/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "strata/core/block_copy.h"
#include "strata/core/error.h"
#include "strata/core/fp4_rows.h"

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

// Two e2m1 codes share a byte, so an F4_E2M1 tensor's rows are whole bytes: an even last dimension
// (a 0-d tensor, one element, has none).
void check_f4_shape(const Shape& shape, DType dtype, const char* where) {
  if (dtype != DType::kF4E2M1) return;
  STRATA_CHECK(!shape.empty() && shape.back() % 2 == 0, where, ": F4_E2M1", shape_str(shape),
               " needs an even last dimension (two codes a byte)");
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
  check_f4_shape(shape, dtype, "Tensor::empty");
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
  check_f4_shape(shape, dtype, "Tensor::view_of");
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
  STRATA_CHECK(dtype_ != DType::kF4E2M1 || (!shape.empty() && shape.back() % 2 == 0), "reshape: cannot view ",
               describe(), " as ", shape_str(shape), ": F4_E2M1 needs an even last dimension (two codes a byte)");
  Tensor t = *this;
  if (scale_) {
    STRATA_CHECK(!shape.empty() && shape.back() == shape_.back(), "reshape: ", describe(),
                 " keeps its last dimension (its block scale runs along it), got ", shape_str(shape));
    Shape rows_shape(shape.begin(), shape.end() - 1);
    Shape s = rows_shape;
    s.push_back(scale_->shape().back());
    t.scale_ = std::make_shared<const Tensor>(scale_->reshape(std::move(s)));
    if (global_) t.global_ = std::make_shared<const Tensor>(global_->reshape(std::move(rows_shape)));
  }
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view_as(Shape shape, DType dtype) const {
  check_f4_shape(shape, dtype, "view_as");
  STRATA_CHECK(!scale_, "view_as: ", describe(), " is block-scaled (its scales would not follow)");
  STRATA_CHECK(dtype_bytes(dtype, shape_numel(shape)) == nbytes(), "view_as: cannot view ", describe(), " as ",
               dtype_name(dtype), shape_str(shape), " (a different byte count)");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  STRATA_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
               "rows: [", begin, ", ", end, ") out of range for ", describe());
  STRATA_CHECK(dtype_ != DType::kF4E2M1 || ndim() >= 2, "rows: ", describe(),
               " has no rows of whole bytes (F4_E2M1 packs two codes a byte)");
  const size_t row_bytes = dtype_bytes(dtype_, shape_numel(Shape(shape_.begin() + 1, shape_.end())));
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = std::shared_ptr<void>(data_, static_cast<char*>(data_.get()) + begin * row_bytes);
  if (scale_) t.scale_ = std::make_shared<const Tensor>(scale_->rows(begin, end));
  if (global_) t.global_ = std::make_shared<const Tensor>(global_->rows(begin, end));
  return t;
}

Tensor Tensor::to_f32() const {
  STRATA_CHECK(device_ == Device::kCpu, "to_f32: tensor is not on the CPU");
  if (dtype_ == DType::kF4E2M1) return f4_to_f32();
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

Tensor Tensor::f4_to_f32() const {
  STRATA_CHECK(scale_, "to_f32: ", describe(), " needs its block scales (with_scale) to mean numbers");
  Tensor out = empty(shape_, DType::kF32);
  const int64_t cols = shape_.back(), rows = cols ? numel() / cols : 0, groups = scale_->shape().back();
  const int group = scale_group_;
  const uint8_t* codes = data<uint8_t>();
  const uint8_t* s = scale_->data<uint8_t>();
  if (global_) {
    const float* g = global_->data<float>();
    unpack_fp4_rows(codes, rows, cols, out.data<float>(), [&](int64_t r, int64_t c, uint8_t code) {
      return nvfp4_value(code, s[r * groups + c / group], g[r]);
    });
  } else {
    unpack_fp4_rows(codes, rows, cols, out.data<float>(), [&](int64_t r, int64_t c, uint8_t code) {
      return mxfp4_value(code, s[r * groups + c / group]);
    });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  Tensor out = empty(shape_, dtype_, device);
  // The non-CPU side's allocator knows how to move bytes across.
  Allocator& a = allocator_for(device == Device::kCpu ? device_ : device);
  a.copy(out.raw(), device, raw(), device_, nbytes());
  if (scale_) out = out.with_scale(scale_->to(device), scale_group_, global_ ? global_->to(device) : Tensor());
  return out;
}

Tensor Tensor::with_scale(Tensor scale, int group, Tensor global) const {
  const bool f4 = dtype_ == DType::kF4E2M1;
  STRATA_CHECK((dtype_ == DType::kF8E4M3 || f4) && ndim() >= 2, "with_scale: ", describe(),
               " is not an F8_E4M3 or F4_E2M1 matrix or stack of them");
  const Shape rows_shape(shape_.begin(), shape_.end() - 1);
  Shape want = rows_shape;
  DType want_dtype = DType::kF32;
  if (f4) {
    STRATA_CHECK(group == 16 || group == 32, "with_scale: ", describe(),
                 " takes group 16 (NVFP4: F8_E4M3 scales) or 32 (MXFP4: UE8M0 scales), got ", group);
    STRATA_CHECK(shape_.back() % group == 0, "with_scale: ", describe(), " has rows of ", shape_.back(),
                 " codes, not whole groups of ", group);
    want_dtype = group == 16 ? DType::kF8E4M3 : DType::kUE8M0;
    want.push_back(shape_.back() / group);
  } else {
    STRATA_CHECK(group > 0, "with_scale: ", describe(), " group ", group);
    want.push_back((shape_.back() + group - 1) / group);
  }
  STRATA_CHECK(scale.dtype() == want_dtype && scale.shape() == want && scale.device() == device_,
               "with_scale: the scale of ", describe(), " per ", group, " columns must be ", dtype_name(want_dtype),
               shape_str(want), " on its device, got ", scale.describe());
  const bool nvfp4 = f4 && group == 16;
  if (nvfp4) {
    STRATA_CHECK(global.defined() && global.dtype() == DType::kF32 && global.shape() == rows_shape &&
                     global.device() == device_,
                 "with_scale: the global scale of NVFP4 ", describe(), " must be F32", shape_str(rows_shape),
                 " (one a row) on its device, got ", global.defined() ? global.describe() : "none");
  } else {
    STRATA_CHECK(!global.defined(), "with_scale: ", describe(), " per ", group,
                 " columns takes no global scale (only NVFP4 does), got ", global.describe());
  }
  Tensor t = *this;
  t.scale_ = std::make_shared<const Tensor>(std::move(scale));
  t.global_ = nvfp4 ? std::make_shared<const Tensor>(std::move(global)) : nullptr;
  t.scale_group_ = group;
  return t;
}

Tensor Tensor::with_scale(Tensor scale, int group) const { return with_scale(std::move(scale), group, Tensor()); }

Tensor Tensor::scale() const { return scale_ ? *scale_ : Tensor(); }

Tensor Tensor::global_scale() const { return global_ ? *global_ : Tensor(); }

std::string Tensor::describe() const {
  std::string d = cat(dtype_name(dtype_), shape_str(shape_));
  if (!scale_) return d;
  d = cat(d, " scaled per ", scale_group_);
  if (dtype_ != DType::kF4E2M1) return d;  // FP8: the scale is F32
  return cat(d, " (", dtype_name(scale_->dtype()), global_ ? ", F32 global a row)" : ")");
}

}  // namespace strata
