#include "strata/engine/state_pool.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {

StatePool::StatePool(int32_t seq_slots, int32_t snapshot_slots)
    : seq_slots_(seq_slots), snaps_(size_t(std::max(snapshot_slots, 0))) {
  STRATA_CHECK(seq_slots > 0 && snapshot_slots >= 0, "state pool: bad sizes ", seq_slots,
               " sequence slots, ", snapshot_slots, " snapshot slots");
  for (int32_t s = seq_slots - 1; s >= 0; --s) free_.push_back(s);
  for (int32_t s = num_slots() - 1; s >= seq_slots; --s) free_snaps_.push_back(s);
}

int32_t StatePool::allocate() {
  STRATA_CHECK(!free_.empty(), "state pool: no free sequence slot");
  const int32_t s = free_.back();
  free_.pop_back();
  return s;
}

void StatePool::release(int32_t slot) {
  STRATA_CHECK(slot >= 0 && slot < seq_slots_ &&
                   std::find(free_.begin(), free_.end(), slot) == free_.end(),
               "state pool: slot ", slot, " released twice or out of range");
  free_.push_back(slot);
}

std::optional<int32_t> StatePool::find(uint64_t hash, PageId page) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || !(snap(it->second).page == page)) return std::nullopt;
  Snapshot& s = snap(it->second);
  lru_.splice(lru_.end(), lru_, s.lru);
  return it->second;
}

bool StatePool::holds(int32_t slot, uint64_t hash, PageId page) const {
  if (slot < seq_slots_ || slot >= num_slots()) return false;
  const Snapshot& s = snap(slot);
  return s.used && s.hash == hash && s.page == page;
}

void StatePool::forget(int32_t slot) {
  Snapshot& s = snap(slot);
  if (!s.used) return;
  auto it = by_hash_.find(s.hash);
  if (it != by_hash_.end() && it->second == slot) by_hash_.erase(it);
  lru_.erase(s.lru);
  s.used = false;
}

void StatePool::keep(int32_t slot, uint64_t hash, PageId page) {
  auto it = by_hash_.find(hash);
  if (it != by_hash_.end() && it->second != slot) {
    const int32_t old = it->second;
    forget(old);
    free_snaps_.push_back(old);
  }
  Snapshot& s = snap(slot);
  s.used = true;
  s.hash = hash;
  s.page = page;
  s.lru = lru_.insert(lru_.end(), slot);
  by_hash_[hash] = slot;
}

std::optional<StatePool::Store> StatePool::store(uint64_t hash, PageId page, int32_t reuse) {
  if (snaps_.empty()) return std::nullopt;
  if (auto hit = find(hash, page)) return Store{*hit, false};
  int32_t slot;
  if (reuse >= seq_slots_ && reuse < num_slots() && snap(reuse).used) {
    slot = reuse;
    forget(slot);
  } else if (!free_snaps_.empty()) {
    slot = free_snaps_.back();
    free_snaps_.pop_back();
  } else {
    slot = lru_.front();
    forget(slot);
  }
  keep(slot, hash, page);
  return Store{slot, true};
}

void StatePool::drop(uint64_t hash, PageId page) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || !(snap(it->second).page == page)) return;
  const int32_t slot = it->second;
  forget(slot);
  free_snaps_.push_back(slot);
}

void StatePool::clear_snapshots() {
  while (!lru_.empty()) {
    const int32_t slot = lru_.front();
    forget(slot);
    free_snaps_.push_back(slot);
  }
}

}  // namespace strata
