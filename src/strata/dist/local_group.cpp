#include <condition_variable>
#include <cstring>
#include <mutex>

#include "strata/core/error.h"
#include "strata/dist/communicator.h"

namespace strata::dist {

// A reusable barrier plus a slot per rank where each publishes the tensor of the collective
// in progress.
struct LocalGroup::State {
  explicit State(int n) : size(n), slots(size_t(n)) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const Tensor*> slots;
  std::string abort_reason;  // set once by abort(); every barrier fails from then on

  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    check_aborted();
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !abort_reason.empty(); });
      check_aborted();
    }
  }
  void check_aborted() const {
    STRATA_CHECK(abort_reason.empty(), "LocalGroup: collective abandoned: ", abort_reason);
  }
};

namespace {

class LocalRank final : public Communicator {
 public:
  LocalRank(LocalGroup::State* s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void all_reduce_sum(const Tensor& t) override {
    check(t, "all_reduce_sum", true);
    publish(t);
    // Every rank sums the same slots in the same order into a private copy, then writes it.
    Tensor sum = Tensor::empty(t.shape(), DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = 0.f;
      for (int r = 0; r < s_->size; ++r) v += slot_f32(r, i);
      sum.data<float>()[i] = v;
    }
    s_->barrier();  // everyone has read every slot
    store(sum, t);
    s_->barrier();
  }

  void all_gather(const Tensor& local, const Tensor& out) override {
    check(local, "all_gather", false);
    STRATA_CHECK(out.dtype() == local.dtype() && out.numel() == local.numel() * s_->size &&
                     out.device() == Device::kCpu,
                 "all_gather: out ", out.describe(), " for ", s_->size, " x ", local.describe());
    publish(local);
    const size_t bytes = local.nbytes();
    for (int r = 0; r < s_->size; ++r) {
      std::memcpy(static_cast<char*>(out.raw()) + size_t(r) * bytes, s_->slots[size_t(r)]->raw(), bytes);
    }
    s_->barrier();
  }

  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    check(in, "reduce_scatter_sum", true);
    STRATA_CHECK(out.numel() * s_->size == in.numel() && out.dtype() == in.dtype(), "reduce_scatter_sum: out ",
                 out.describe(), " for ", in.describe(), " over ", s_->size, " ranks");
    publish(in);
    Tensor part = Tensor::empty(out.shape(), DType::kF32);
    const int64_t n = out.numel(), base = int64_t(rank_) * n;
    for (int64_t i = 0; i < n; ++i) {
      float v = 0.f;
      for (int r = 0; r < s_->size; ++r) v += slot_f32(r, base + i);
      part.data<float>()[i] = v;
    }
    s_->barrier();
    store(part, out);
  }

  void all_to_all(const Tensor& in, const Tensor& out) override {
    check(in, "all_to_all", false);
    STRATA_CHECK(out.shape() == in.shape() && out.dtype() == in.dtype() && in.dim(0) % s_->size == 0,
                 "all_to_all: in ", in.describe(), ", out ", out.describe(), " over ", s_->size, " ranks");
    publish(in);
    const size_t chunk = in.nbytes() / size_t(s_->size);
    for (int j = 0; j < s_->size; ++j) {
      std::memcpy(static_cast<char*>(out.raw()) + size_t(j) * chunk,
                  static_cast<const char*>(s_->slots[size_t(j)]->raw()) + size_t(rank_) * chunk, chunk);
    }
    s_->barrier();
  }

 private:
  // Sums take F32; the copying collectives any dtype.
  static void check(const Tensor& t, const char* op, bool sum) {
    STRATA_CHECK(t.device() == Device::kCpu && (!sum || t.dtype() == DType::kF32), op,
                 ": LocalGroup exchanges CPU tensors (F32 for sums), got ", t.describe());
  }
  // Publishes t in this rank's slot and waits until every rank has published (and until the
  // shapes agree).
  void publish(const Tensor& t) {
    s_->slots[size_t(rank_)] = &t;
    s_->barrier();
    for (int r = 0; r < s_->size; ++r) {
      STRATA_CHECK(s_->slots[size_t(r)]->numel() == t.numel() && s_->slots[size_t(r)]->dtype() == t.dtype(),
                   "LocalGroup: rank ", r, " brought ", s_->slots[size_t(r)]->describe(), ", rank ", rank_,
                   " brought ", t.describe());
    }
  }
  float slot_f32(int r, int64_t i) const { return s_->slots[size_t(r)]->data<float>()[i]; }
  static void store(const Tensor& sum, const Tensor& t) { std::memcpy(t.raw(), sum.raw(), t.nbytes()); }

  LocalGroup::State* s_;
  int rank_;
};

}  // namespace

LocalGroup::LocalGroup(int size) : state_(std::make_unique<State>(size)) {
  STRATA_CHECK(size >= 1, "LocalGroup: size must be >= 1, got ", size);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<LocalRank>(state_.get(), r));
}

LocalGroup::~LocalGroup() = default;

Communicator& LocalGroup::rank(int r) {
  STRATA_CHECK(r >= 0 && r < int(ranks_.size()), "LocalGroup: rank ", r, " of ", ranks_.size());
  return *ranks_[size_t(r)];
}

int LocalGroup::size() const { return int(ranks_.size()); }

void LocalGroup::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->abort_reason.empty()) state_->abort_reason = reason.empty() ? "aborted" : reason;
  state_->cv.notify_all();
}

}  // namespace strata::dist
