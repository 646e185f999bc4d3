#include "strata/engine/block_pool.h"

#include <algorithm>
#include <cstring>

#include "strata/core/error.h"

namespace strata {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), blocks_(size_t(std::max(num_blocks, 0))),
      tokens_(size_t(std::max(num_blocks, 0)) * size_t(block_size)) {
  STRATA_CHECK(num_blocks > 0 && block_size > 0, "block pool: need at least one page of at least ",
               "one token, got ", num_blocks, " pages of ", block_size);
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

void BlockPool::unlink(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (k.prev >= 0) blocks_[size_t(k.prev)].next = k.next; else head_ = k.next;
  if (k.next >= 0) blocks_[size_t(k.next)].prev = k.prev; else tail_ = k.prev;
  k.prev = k.next = -1;
  k.in_free_list = false;
  --num_free_;
}

void BlockPool::push_front(int32_t b) {
  Block& k = blocks_[size_t(b)];
  k.prev = -1;
  k.next = head_;
  if (head_ >= 0) blocks_[size_t(head_)].prev = b; else tail_ = b;
  head_ = b;
  k.in_free_list = true;
  ++num_free_;
}

void BlockPool::push_back(int32_t b) {
  Block& k = blocks_[size_t(b)];
  k.next = -1;
  k.prev = tail_;
  if (tail_ >= 0) blocks_[size_t(tail_)].next = b; else head_ = b;
  tail_ = b;
  k.in_free_list = true;
  ++num_free_;
}

void BlockPool::uncache(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (!k.cached) return;
  if (on_evict) on_evict(identity(b), k.hash);
  auto it = by_hash_.find(k.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  k.cached = false;
}

std::vector<int32_t> BlockPool::allocate(int32_t n) {
  STRATA_CHECK(n >= 0 && n <= num_free_, "block pool: ", n, " pages asked, ", num_free_, " free");
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    unlink(b);
    uncache(b);
    Block& k = blocks_[size_t(b)];
    ++k.generation;
    k.refs = 1;
    ++total_refs_;
    out.push_back(b);
  }
  return out;
}

void BlockPool::acquire(int32_t block) {
  Block& k = blocks_[size_t(block)];
  if (k.refs == 0) unlink(block);
  ++k.refs;
  ++total_refs_;
}

void BlockPool::release(const std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Block& k = blocks_[size_t(*it)];
    STRATA_CHECK(k.refs > 0, "block pool: page ", *it, " released more often than taken");
    --total_refs_;
    if (--k.refs == 0) {
      if (k.cached) push_back(*it); else push_front(*it);
    }
  }
}

std::optional<PageId> BlockPool::lookup(uint64_t hash, const int32_t* tokens, PageId parent) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const int32_t b = it->second;
  const Block& k = blocks_[size_t(b)];
  if (!k.cached || !(k.parent == parent)) return std::nullopt;
  if (std::memcmp(tokens_.data() + size_t(b) * size_t(block_size_), tokens,
                  size_t(block_size_) * sizeof(int32_t)) != 0) {
    return std::nullopt;
  }
  return identity(b);
}

PageId BlockPool::register_full(int32_t block, uint64_t hash, const int32_t* tokens, PageId parent) {
  if (auto hit = lookup(hash, tokens, parent)) return *hit;
  Block& k = blocks_[size_t(block)];
  if (k.cached) return identity(block);  // already the entry (shared page)
  auto it = by_hash_.find(hash);
  if (it != by_hash_.end()) {
    // A stale entry (its parent was recycled) or a true 64-bit collision: the newer page wins.
    const int32_t old = it->second;
    uncache(old);
    if (blocks_[size_t(old)].in_free_list) {  // keep uncached free pages at the front
      unlink(old);
      push_front(old);
    }
  }
  k.cached = true;
  k.hash = hash;
  k.parent = parent;
  std::memcpy(tokens_.data() + size_t(block) * size_t(block_size_), tokens,
              size_t(block_size_) * sizeof(int32_t));
  by_hash_[hash] = block;
  return identity(block);
}

void BlockPool::clear_cache() {
  for (int32_t b = 0; b < num_blocks(); ++b) {
    if (!blocks_[size_t(b)].cached) continue;
    uncache(b);
    if (blocks_[size_t(b)].in_free_list) {
      unlink(b);
      push_front(b);
    }
  }
}

}  // namespace strata
