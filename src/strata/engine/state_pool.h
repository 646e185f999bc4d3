// StatePool: the recurrent-state slots (one per running sequence) and a bounded LRU of state
// snapshots for prefix caching, kept in extra slots of the same pool tensors.
//
// Slots [0, seq_slots) belong to sequences; [seq_slots, seq_slots + snapshot_slots) hold
// snapshots. A snapshot is the state after the last token of one cached page, keyed by that
// page's prefix hash and bound to the page's identity (PageId), so a snapshot is only found
// through the exact cached page chain it was taken on.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "strata/engine/block_pool.h"

namespace strata {

class StatePool {
 public:
  StatePool(int32_t seq_slots, int32_t snapshot_slots);

  int32_t num_slots() const { return seq_slots_ + int32_t(snaps_.size()); }
  int32_t seq_slots() const { return seq_slots_; }
  int32_t snapshot_slots() const { return int32_t(snaps_.size()); }
  int32_t num_free_seq_slots() const { return int32_t(free_.size()); }
  int32_t allocate();  // a sequence slot; throws when none is free
  void release(int32_t slot);

  int32_t num_snapshots() const { return int32_t(by_hash_.size()); }
  // The snapshot slot for the state after `page` (hash `hash`), marking it recently used.
  std::optional<int32_t> find(uint64_t hash, PageId page);
  bool holds(int32_t slot, uint64_t hash, PageId page) const;
  struct Store {
    int32_t slot;
    bool copy;  // false: an identical snapshot is kept already
  };
  // Where to write the snapshot for (hash, page): the existing one for that key (copy = false),
  // else `reuse` when it is a snapshot slot the caller owns (re-keyed), else a free slot or the
  // least recently used one. nullopt when the pool has no snapshot slots.
  std::optional<Store> store(uint64_t hash, PageId page, int32_t reuse = -1);
  void drop(uint64_t hash, PageId page);  // when the page leaves the cache
  void clear_snapshots();

 private:
  struct Snapshot {
    bool used = false;
    uint64_t hash = 0;
    PageId page;
    std::list<int32_t>::iterator lru;  // into lru_, when used
  };
  Snapshot& snap(int32_t slot) { return snaps_[size_t(slot - seq_slots_)]; }
  const Snapshot& snap(int32_t slot) const { return snaps_[size_t(slot - seq_slots_)]; }
  void forget(int32_t slot);
  void keep(int32_t slot, uint64_t hash, PageId page);

  int32_t seq_slots_;
  std::vector<int32_t> free_;       // free sequence slots (a stack)
  std::vector<Snapshot> snaps_;
  std::vector<int32_t> free_snaps_;
  std::list<int32_t> lru_;          // used snapshot slots, least recently used first
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

}  // namespace strata
