#include "strata/models/parallel_model.h"

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "strata/core/error.h"
#include "strata/dist/communicator.h"

namespace strata {
namespace {

// One thread per rank but rank 0 (the caller's). run(fn) calls fn(r) on rank r's thread, fn(0)
// on the caller's, and returns when every rank is done, rethrowing the first failure; a failing
// rank aborts the group so that no other rank waits for it inside a collective.
class RankThreads {
 public:
  RankThreads(int size, dist::LocalGroup& group) : group_(group), errors_(size_t(size)) {
    for (int r = 1; r < size; ++r) threads_.emplace_back([this, r] { work(r); });
  }

  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = int(threads_.size());
      first_error_ = -1;
      for (std::exception_ptr& e : errors_) e = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    call(fn, 0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
    if (first_error_ >= 0) std::rethrow_exception(errors_[size_t(first_error_)]);
  }

 private:
  void work(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      call(*job, rank);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      done_.notify_all();
    }
  }

  void call(const std::function<void(int)>& fn, int rank) {
    try {
      fn(rank);
    } catch (const std::exception& e) {
      record(rank, std::current_exception());
      group_.abort(cat("rank ", rank, " failed: ", e.what()));
    } catch (...) {
      record(rank, std::current_exception());
      group_.abort(cat("rank ", rank, " failed"));
    }
  }

  void record(int rank, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    errors_[size_t(rank)] = std::move(e);
    if (first_error_ < 0) first_error_ = rank;  // the others' errors follow from its abort
  }

  dist::LocalGroup& group_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  int first_error_ = -1;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

class ParallelModel final : public Model {
 public:
  ParallelModel(const std::string& dir, const LoadOptions& load, const ParallelOptions& options)
      : size_(options.tensor_parallel_size), group_(size_), ranks_(size_t(size_)),
        rank_logits_(size_t(size_)), threads_(size_, group_) {
    // Each rank's thread reads and converts only its own slices of the mapped checkpoint.
    threads_.run([&](int r) {
      LoadOptions o = load;
      o.parallel = dist::Parallel{r, size_, &group_.rank(r), options.expert_parallel};
      ranks_[size_t(r)] = load_model(dir, o);
    });
    info_ = ranks_[0]->info();
    info_.weight_bytes = 0;
    for (const auto& m : ranks_) info_.weight_bytes += m->info().weight_bytes;
  }

  const ModelInfo& info() const override { return info_; }
  Device device() const override { return ranks_[0]->device(); }

  Caches allocate_caches(int num_blocks, int block_size, int num_slots) const override {
    Caches c = ranks_[0]->allocate_caches(num_blocks, block_size, num_slots);
    for (int r = 1; r < size_; ++r) {
      c.peers.push_back(ranks_[size_t(r)]->allocate_caches(num_blocks, block_size, num_slots));
    }
    return c;
  }

  void forward(const ForwardBatch& batch, Caches& caches, Tensor& logits) override {
    STRATA_CHECK(failure_.empty(), "tensor-parallel forward: the model failed in an earlier forward (",
                 failure_, ")");
    // Checked here, before any rank starts: a batch one rank refuses would fail them all.
    batch.validate(caches.block_size, caches.num_blocks, caches.num_slots);
    STRATA_CHECK(int(caches.peers.size()) == size_ - 1, "tensor-parallel forward: caches for ",
                 caches.peers.size() + 1, " ranks, the model has ", size_,
                 " (allocate them with Model::allocate_caches)");
    for (const Caches& p : caches.peers) {
      STRATA_CHECK(p.block_size == caches.block_size && p.num_blocks == caches.num_blocks &&
                       p.num_slots == caches.num_slots,
                   "tensor-parallel forward: a rank's caches differ in pages or slots from rank 0's");
    }
    try {
      threads_.run([&](int r) {
        Caches& c = r == 0 ? caches : caches.peers[size_t(r - 1)];
        Tensor& out = r == 0 ? logits : rank_logits_[size_t(r)];
        ranks_[size_t(r)]->forward(batch, c, out);
      });
    } catch (const std::exception& e) {
      failure_ = e.what();
      throw;
    }
  }

 private:
  int size_;
  dist::LocalGroup group_;
  std::vector<std::unique_ptr<Model>> ranks_;
  std::vector<Tensor> rank_logits_;  // ranks 1..: the same logits as rank 0's, unused
  ModelInfo info_;
  std::string failure_;
  RankThreads threads_;  // last: its threads stop before the models go
};

}  // namespace

std::unique_ptr<Model> load_parallel_model(const std::string& dir, const LoadOptions& load,
                                           const ParallelOptions& options) {
  const int n = options.tensor_parallel_size;
  STRATA_CHECK(n >= 1, "--tensor-parallel-size must be >= 1, got ", n);
  STRATA_CHECK(load.parallel.size == 1, "load_parallel_model: LoadOptions.parallel is set per rank here");
  if (n == 1) return load_model(dir, load);
  STRATA_CHECK(load.device == Device::kCpu, "--tensor-parallel-size ", n,
               ": tensor parallelism runs on --device cpu only so far (the CUDA backend drives one GPU)");
  return std::make_unique<ParallelModel>(dir, load, options);
}

}  // namespace strata
