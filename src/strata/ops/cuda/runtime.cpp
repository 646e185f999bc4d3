// The CUDA runtime of the backend: device selection, the stream, the allocator (a caching pool
// plus the per-forward workspace arena) and the device copies of forward batches.
#include "strata/ops/cuda/runtime.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <memory>
#include <mutex>

#include "strata/ops/cuda/cuda_ops.h"

namespace strata::ops::cuda {
namespace {

std::atomic<bool> g_shutdown{false};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Persistent device memory: blocks are cached by rounded size and reused in stream order (one
// stream, so a block freed while queued kernels still use it is only handed to later work).
class Pool {
 public:
  ~Pool() { g_shutdown = true; }

  void* get(size_t bytes, size_t* rounded) {
    *rounded = bytes <= (1u << 20) ? round_up(std::max<size_t>(bytes, 1), 512) : round_up(bytes, 2u << 20);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(*rounded);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, *rounded);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_cached();
      e = cudaMalloc(&p, *rounded);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      fail("out of GPU memory allocating ", bytes, " bytes (", free_b >> 20, " MiB free of ",
           total_b >> 20, " MiB): ", cudaGetErrorString(e));
    }
    return p;
  }

  void put(void* p, size_t rounded) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace(rounded, p);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    (void)cudaStreamSynchronize(stream());
    for (auto& [size, p] : free_) (void)cudaFree(p);
    free_.clear();
  }

 private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
};

// The workspace of one forward: a stack over chunks that are never freed. A block released
// at the top of the stack (and every released block under it) gives its space back at once, so
// a layer's temporaries are reused by the next layer and the workspace peaks at about one
// layer's worth instead of the sum over the forward. The same sequence of allocations and
// releases gets the same addresses every forward (CUDA graph replay needs this); one stream
// orders the kernels, so reusing a block right after its release is safe.
class Arena {
 public:
  void* get(size_t bytes) {
    const size_t need = round_up(std::max<size_t>(bytes, 1), 256);
    while (cur_ < chunks_.size() && offset_ + need > chunks_[cur_].size) {
      ++cur_;
      offset_ = 0;
    }
    if (cur_ == chunks_.size()) {
      STRATA_CHECK(!capturing(), "CUDA workspace arena must grow during graph capture");
      const size_t last = chunks_.empty() ? 0 : chunks_.back().size;
      const size_t size = std::max({need, 2 * last, size_t(64) << 20});
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, size);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fail("out of GPU memory growing the forward workspace by ", size >> 20, " MiB");
      }
      chunks_.push_back({p, size});
      offset_ = 0;
    }
    void* p = static_cast<char*>(chunks_[cur_].base) + offset_;
    stack_.push_back({p, cur_, offset_, false});
    offset_ += need;
    return p;
  }
  void release(void* p) {
    auto it = std::find_if(stack_.rbegin(), stack_.rend(),
                           [p](const Block& b) { return b.ptr == p && !b.released; });
    if (it == stack_.rend()) return;  // reset() already dropped it (a leak reported by live())
    it->released = true;
    while (!stack_.empty() && stack_.back().released) {
      cur_ = stack_.back().chunk;
      offset_ = stack_.back().offset;
      stack_.pop_back();
    }
  }
  void reset() {
    stack_.clear();
    cur_ = 0;
    offset_ = 0;
  }
  int64_t live() const {
    return std::count_if(stack_.begin(), stack_.end(), [](const Block& b) { return !b.released; });
  }

 private:
  struct Chunk {
    void* base;
    size_t size;
  };
  struct Block {  // where a block starts: releasing the top block moves the top back there
    void* ptr;
    size_t chunk, offset;
    bool released;
  };
  std::vector<Chunk> chunks_;
  std::vector<Block> stack_;
  size_t cur_ = 0, offset_ = 0;
};

// The persistent buffers that hold the forward's batch: a pinned staging area and its device
// twin. Arrays are packed densely in a layout fixed by (T, S, N), so that two batches of the
// same shape land at the same addresses (graph replay).
struct BatchBuffers {
  Tensor device;
  std::shared_ptr<int32_t> host;
  size_t capacity = 0;  // ints
  uint64_t generation = 0;
  cudaEvent_t copied = nullptr;
};

struct Layout {
  size_t tokens, positions, token_seq, q_start, q_len, ctx, slot, logit_rows, block_table, feed_rows, feed_from,
      total;
};

// The feed comes last, so that it leaves the other arrays where a graph captured them.
Layout layout_for(int t, int s, int n, int stride, int feed) {
  Layout l;
  size_t at = 16;  // [0] holds the block-table stride
  auto take = [&](size_t count) {
    const size_t here = at;
    at += round_up(std::max<size_t>(count, 1), 16);
    return here;
  };
  l.tokens = take(t);
  l.positions = take(t);
  l.token_seq = take(t);
  l.q_start = take(s);
  l.q_len = take(s);
  l.ctx = take(s);
  l.slot = take(s);
  l.logit_rows = take(n);
  l.block_table = take(size_t(s) * stride);
  l.feed_rows = take(feed);
  l.feed_from = take(feed);
  l.total = at;
  return l;
}

int stride_of(const ForwardBatch& b) {
  size_t m = 1;
  for (const SeqInBatch& s : b.seqs) m = std::max(m, s.block_table.size());
  return int(m);
}

// Writes the batch into `dst` (layout `l`); sequences from `padding_from` on are padding.
void pack(const ForwardBatch& b, const Layout& l, int stride, int padding_from, int32_t* dst) {
  dst[0] = stride;
  const int t = b.num_tokens();
  std::copy(b.token_ids.begin(), b.token_ids.end(), dst + l.tokens);
  std::copy(b.positions.begin(), b.positions.end(), dst + l.positions);
  for (size_t si = 0; si < b.seqs.size(); ++si) {
    const SeqInBatch& s = b.seqs[si];
    const bool pad = int(si) >= padding_from;
    for (int32_t i = 0; i < s.q_len && s.q_start + i < t; ++i) dst[l.token_seq + s.q_start + i] = int32_t(si);
    dst[l.q_start + si] = s.q_start;
    dst[l.q_len + si] = s.q_len;
    dst[l.ctx + si] = s.ctx_len;
    dst[l.slot + si] = pad ? -1 : s.state_slot;
    int32_t* row = dst + l.block_table + si * size_t(stride);
    for (int p = 0; p < stride; ++p) {
      row[p] = (pad || p >= int(s.block_table.size())) ? -1 : s.block_table[p];
    }
  }
  std::copy(b.logit_rows.begin(), b.logit_rows.end(), dst + l.logit_rows);
  std::copy(b.feed_rows.begin(), b.feed_rows.end(), dst + l.feed_rows);
  std::copy(b.feed_from.begin(), b.feed_from.end(), dst + l.feed_from);
}

Layout layout_of(const ForwardBatch& b, int stride) {
  return layout_for(b.num_tokens(), int(b.seqs.size()), int(b.logit_rows.size()), stride,
                    int(b.feed_rows.size()));
}

DeviceBatch view_of(const ForwardBatch& b, const Layout& l, const int32_t* base) {
  DeviceBatch v;
  v.num_tokens = b.num_tokens();
  v.num_seqs = int(b.seqs.size());
  v.num_logit_rows = int(b.logit_rows.size());
  v.all_single_token = true;
  for (const SeqInBatch& s : b.seqs) {
    v.max_q_len = std::max(v.max_q_len, int(s.q_len));
    v.all_single_token = v.all_single_token && s.q_len == 1;
  }
  v.bt_stride = base;
  v.token_ids = base + l.tokens;
  v.positions = base + l.positions;
  v.token_seq = base + l.token_seq;
  v.q_start = base + l.q_start;
  v.q_len = base + l.q_len;
  v.ctx_len = base + l.ctx;
  v.slot = base + l.slot;
  v.logit_rows = base + l.logit_rows;
  v.block_table = base + l.block_table;
  return v;
}

class Backend;
Backend& backend();

class CudaAllocator final : public Allocator {
 public:
  std::shared_ptr<void> allocate(size_t bytes) override;
  void zero(void* ptr, size_t bytes) override {
    if (bytes) STRATA_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream()));
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    if (!bytes) return;
    STRATA_CHECK(!(dst_device == Device::kCpu && capturing()),
                 "copying a GPU tensor to the host is not allowed during graph capture");
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
    if (dst_device == Device::kCpu) STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    (void)src_device;
  }
};

thread_local bool t_in_forward = false;
thread_local int t_padding_from = INT_MAX;

class Backend {
 public:
  Backend() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      fail("no CUDA device found (the CUDA backend needs a GPU)");
    }
    STRATA_CUDA_CHECK(cudaSetDevice(0));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, 0));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&forward_buf_.copied, cudaEventDisableTiming));
  }

  cudaStream_t stream_ = nullptr;
  int sms_ = 0, smem_ = 0;
  Pool pool_;
  Arena arena_;
  BatchBuffers forward_buf_;
  const ForwardBatch* current_ = nullptr;
  DeviceBatch current_view_;
  Tensor adhoc_keep_;
  DeviceBatch adhoc_view_;

  // Packs and uploads b into the persistent forward buffers; returns its layout.
  Layout upload_forward(const ForwardBatch& b, int padding_from) {
    const int stride = stride_of(b);
    const Layout l = layout_of(b, stride);
    BatchBuffers& buf = forward_buf_;
    if (l.total > buf.capacity) {
      STRATA_CHECK(!capturing(), "batch buffers must grow during graph capture");
      STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
      const size_t cap = std::max(l.total * 2, size_t(1) << 16);
      buf.device = Tensor::empty({int64_t(cap)}, DType::kI32, Device::kCuda);
      int32_t* h = nullptr;
      STRATA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h), cap * 4, cudaHostAllocDefault));
      buf.host = std::shared_ptr<int32_t>(h, [](int32_t* p) {
        if (!g_shutdown) (void)cudaFreeHost(p);
      });
      buf.capacity = cap;
      ++buf.generation;
    }
    // The staging area may still feed the previous step's copy.
    STRATA_CUDA_CHECK(cudaEventSynchronize(buf.copied));
    pack(b, l, stride, padding_from, buf.host.get());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(buf.device.raw(), buf.host.get(), l.total * 4,
                                      cudaMemcpyHostToDevice, stream_));
    STRATA_CUDA_CHECK(cudaEventRecord(buf.copied, stream_));
    if (!b.feed_rows.empty() || b.shift.defined() || b.pick.defined()) b.validate_feed();
    int32_t* dev = buf.device.data<int32_t>();
    if (!b.feed_rows.empty()) {
      STRATA_CHECK(b.feed_ids.device() == Device::kCuda && b.feed_ids.dtype() == DType::kI32,
                   "batch: the fed draws must be I32 on the GPU, got ", b.feed_ids.describe());
      feed_tokens(dev + l.tokens, dev + l.feed_rows, dev + l.feed_from, int(b.feed_rows.size()),
                  b.feed_ids.data<int32_t>());
    }
    if (b.shift.defined()) {
      STRATA_CHECK(b.shift.device() == Device::kCuda, "batch: the shift must be on the GPU, got ",
                   b.shift.describe());
      shift_positions(dev + l.ctx, dev + l.positions, dev + l.q_start, int(b.shift.numel()),
                      b.shift.data<int32_t>());
    }
    if (b.pick.defined()) {
      STRATA_CHECK(b.pick.device() == Device::kCuda, "batch: the pick must be on the GPU, got ", b.pick.describe());
      pick_logit_rows(dev + l.logit_rows, dev + l.q_start, int(b.pick.numel()), b.pick.data<int32_t>());
    }
    return l;
  }
};

Backend& backend() {
  static Backend b;
  return b;
}

std::shared_ptr<void> CudaAllocator::allocate(size_t bytes) {
  Backend& b = backend();
  if (t_in_forward) {
    void* p = b.arena_.get(bytes);
    return std::shared_ptr<void>(p, [](void* q) {
      if (!g_shutdown) backend().arena_.release(q);
    });
  }
  size_t rounded = 0;
  void* p = b.pool_.get(bytes, &rounded);
  return std::shared_ptr<void>(p, [rounded](void* q) {
    if (!g_shutdown) backend().pool_.put(q, rounded);
  });
}

CudaAllocator g_allocator;
// The allocator is registered at start-up; the device is only touched at the first allocation.
const bool kRegistered = [] {
  set_allocator(Device::kCuda, &g_allocator);
  return true;
}();

}  // namespace

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("CUDA error in ", what, ": ", cudaGetErrorString(e));
  }
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA kernel ", kernel, " failed to launch: ", cudaGetErrorString(e));
}

bool available() {
  static const bool kAvailable = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();
    return ok;
  }();
  return kAvailable;
}

void init() { (void)backend(); }

void synchronize() { STRATA_CUDA_CHECK(cudaStreamSynchronize(stream())); }

cudaStream_t stream() { return backend().stream_; }
int sm_count() { return backend().sms_; }
int max_shared_memory() { return backend().smem_; }

void allow_shared_memory(const void* kernel, size_t bytes, const char* op) {
  STRATA_CHECK(bytes <= size_t(max_shared_memory()), op, ": needs ", bytes, " bytes of shared memory a block, the GPU "
               "allows ", max_shared_memory());
  STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

bool capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  STRATA_CUDA_CHECK(cudaStreamIsCapturing(backend().stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

void begin_forward(const ForwardBatch& batch) {
  Backend& b = backend();
  STRATA_CHECK(!t_in_forward, "ForwardScope: forwards cannot nest");
  STRATA_CHECK(b.arena_.live() == 0, "ForwardScope: ", b.arena_.live(),
               " workspace tensors of the previous forward are still referenced");
  Layout l;
  if (capturing()) {
    // The graph runner uploaded this batch already; only the view is needed.
    l = layout_of(batch, stride_of(batch));
  } else {
    l = b.upload_forward(batch, t_padding_from);
  }
  b.current_ = &batch;
  b.current_view_ = view_of(batch, l, b.forward_buf_.device.data<int32_t>());
  b.arena_.reset();
  t_in_forward = true;
}

void end_forward() {
  Backend& b = backend();
  t_in_forward = false;
  b.current_ = nullptr;
}

void set_padding_from(int first_padding_seq) { t_padding_from = first_padding_seq; }

uint64_t upload_batch_for_replay(const ForwardBatch& batch) {
  backend().upload_forward(batch, t_padding_from);
  return backend().forward_buf_.generation;
}

uint64_t batch_buffers_generation() { return backend().forward_buf_.generation; }

const DeviceBatch& device_batch(const ForwardBatch& batch) {
  Backend& b = backend();
  if (&batch == b.current_) return b.current_view_;
  STRATA_CHECK(!capturing(), "an op was given a batch other than the forward's during capture");
  const int stride = stride_of(batch);
  const Layout l = layout_of(batch, stride);
  std::vector<int32_t> host(l.total, 0);
  pack(batch, l, stride, INT_MAX, host.data());
  b.adhoc_keep_ = persistent({int64_t(l.total)}, DType::kI32);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(b.adhoc_keep_.raw(), host.data(), l.total * 4,
                                    cudaMemcpyHostToDevice, b.stream_));
  b.adhoc_view_ = view_of(batch, l, b.adhoc_keep_.data<int32_t>());
  return b.adhoc_view_;
}

const int32_t* device_ints(const std::vector<int32_t>& v, Tensor* keep) {
  Backend& b = backend();
  if (b.current_) {
    if (&v == &b.current_->token_ids) return b.current_view_.token_ids;
    if (&v == &b.current_->positions) return b.current_view_.positions;
    if (&v == &b.current_->logit_rows) return b.current_view_.logit_rows;
  }
  STRATA_CHECK(!capturing(), "an op was given host indices that are not the forward batch's "
               "during graph capture");
  *keep = scratch({int64_t(std::max<size_t>(v.size(), 1))}, DType::kI32);
  if (!v.empty()) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(keep->raw(), v.data(), v.size() * 4, cudaMemcpyHostToDevice,
                                      b.stream_));
  }
  return keep->data<int32_t>();
}

Tensor scratch(Shape shape, DType dtype) { return Tensor::empty(std::move(shape), dtype, Device::kCuda); }

Tensor persistent(Shape shape, DType dtype) {
  const bool was = t_in_forward;
  t_in_forward = false;
  Tensor t = Tensor::empty(std::move(shape), dtype, Device::kCuda);
  t_in_forward = was;
  return t;
}

void expect_cuda(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.device() == Device::kCuda, op, ": ", what, " must be on the GPU, got a CPU ",
               t.describe());
}

void expect_float(const Tensor& t, const char* op, const char* what) {
  expect_cuda(t, op, what);
  STRATA_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF32, op, ": ", what,
               " must be BF16 or F32, got ", t.describe());
}

void expect_dtype(const Tensor& t, DType d, const char* op, const char* what) {
  expect_cuda(t, op, what);
  STRATA_CHECK(t.dtype() == d, op, ": ", what, " must be ", dtype_name(d), ", got ", t.describe());
}

}  // namespace strata::ops::cuda
