// BlockPool: the engine's paged KV pages. Each page has a reference count; free pages sit on one
// list, pages that still hold a cached prefix (reusable by hash) after the uncached ones, in
// least-recently-used order, so allocation takes uncached pages first and then evicts the
// least recently freed cached page.
//
// Prefix cache: a full page is registered under the chained hash of its tokens (see
// prefix_hash.h) together with its own token ids and the identity of its parent page. A lookup
// must match the hash, the tokens and the parent identity, so a cached chain is exact by
// induction: a hash collision can only cause a miss, never a wrong reuse. A page's identity
// (PageId) is its index plus a generation that changes whenever the page is reallocated, so a
// page recycled under a child invalidates the child's link to it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

namespace strata {

struct PageId {
  int32_t block = -1;    // -1: the root (no parent)
  uint64_t generation = 0;
  bool operator==(const PageId&) const = default;
};

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return int32_t(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  // Pages not referenced by any sequence (cached or not): what allocate() can hand out.
  int32_t num_free() const { return num_free_; }
  int32_t num_cached() const { return int32_t(by_hash_.size()); }
  int32_t ref_count(int32_t block) const { return blocks_[size_t(block)].refs; }
  int64_t total_refs() const { return total_refs_; }  // over all pages
  bool is_cached(int32_t block) const { return blocks_[size_t(block)].cached; }

  // Takes n pages with one reference each; n must not exceed num_free(). Cached pages taken
  // here leave the cache (on_evict is told first).
  std::vector<int32_t> allocate(int32_t n);
  // One more reference to a page (a prefix-cache hit or a shared page); a free page leaves the
  // free list.
  void acquire(int32_t block);
  // Drops one reference of each page, last page first, so that a sequence's tail pages are
  // evicted before its head when they become free.
  void release(const std::vector<int32_t>& blocks);

  // The cached page for (hash, tokens, parent), if any.
  std::optional<PageId> lookup(uint64_t hash, const int32_t* tokens, PageId parent) const;
  // Registers a freshly computed full page. When an equal page is cached already, that page's
  // identity is returned and `block` stays uncached; otherwise `block` becomes the entry.
  PageId register_full(int32_t block, uint64_t hash, const int32_t* tokens, PageId parent);
  PageId identity(int32_t block) const { return {block, blocks_[size_t(block)].generation}; }
  // Forgets every cached prefix (pages in use stay in use).
  void clear_cache();

  // Called with a page's identity and hash just before its cache entry is dropped.
  std::function<void(PageId, uint64_t)> on_evict;

 private:
  struct Block {
    int32_t refs = 0;
    uint64_t generation = 0;
    bool cached = false;
    uint64_t hash = 0;
    PageId parent;
    int32_t prev = -1, next = -1;  // free-list links
    bool in_free_list = false;
  };
  void uncache(int32_t b);
  void unlink(int32_t b);
  void push_front(int32_t b);
  void push_back(int32_t b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> tokens_;  // [num_blocks * block_size]: the ids of each cached page
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int32_t head_ = -1, tail_ = -1, num_free_ = 0;
  int64_t total_refs_ = 0;
};

}  // namespace strata
