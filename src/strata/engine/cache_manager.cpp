#include "strata/engine/cache_manager.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/engine/prefix_hash.h"

namespace strata {

CacheManager::CacheManager(const Model& model, const CacheConfig& config)
    : config_(config),
      has_state_(model.info().cache.bytes_per_slot() > 0),
      caches_(model.allocate_caches(config.num_blocks, config.block_size,
                                    config.seq_slots + (has_state_ ? config.snapshot_slots : 0) +
                                        (has_state_ && config.speculative
                                             ? config.seq_slots * std::max(1, config.state_steps)
                                             : 0),
                                    config.speculative)),
      blocks_(config.num_blocks, config.block_size),
      states_(config.seq_slots, has_state_ ? config.snapshot_slots : 0) {
  // A page leaving the cache takes the snapshot bound to it along: nothing could find it.
  blocks_.on_evict = [this](PageId page, uint64_t hash) { states_.drop(hash, page); };
}

// Through Caches, so that a tensor-parallel model's every rank gets the copy.
void CacheManager::copy_state(int32_t src, int32_t dst) {
  if (src == dst) return;
  for (const ops::SlotCopy& c : pending_copies_) {
    if (c.dst == src || c.dst == dst || c.src == dst) {
      flush_state_copies();
      break;
    }
  }
  pending_copies_.push_back({src, dst});
}

void CacheManager::flush_state_copies() {
  if (pending_copies_.empty()) return;
  caches_.copy_slots(pending_copies_);
  pending_copies_.clear();
}

void CacheManager::copy_page(int32_t src, int32_t dst) {
  caches_.copy_page(src, dst);
  ++counters_.pages_copied;
}

PrefixHit CacheManager::find_prefix(Sequence& seq) {
  PrefixHit hit;
  if (!config_.prefix_caching) return hit;
  const int32_t bs = config_.block_size;
  extend_page_hashes(seq.tokens, bs, seq.page_hashes);
  if (seq.needs_prompt_logits()) return hit;  // every prompt position's logits are wanted
  // At least the last token is computed, for its logits.
  const int32_t usable = (seq.num_tokens() - 1) / bs;
  std::vector<PageId> matched;
  for (int32_t i = 0; i < usable; ++i) {
    const PageId parent = i ? matched.back() : PageId{};
    auto page = blocks_.lookup(seq.page_hashes[size_t(i)], seq.tokens.data() + size_t(i) * bs, parent);
    if (!page) break;
    matched.push_back(*page);
  }
  int32_t k = int32_t(matched.size());
  if (has_state_) {
    while (k > 0) {
      if (auto slot = states_.find(seq.page_hashes[size_t(k - 1)], matched[size_t(k - 1)])) {
        hit.snapshot_slot = *slot;
        break;
      }
      --k;
    }
    if (int32_t(matched.size()) > k) hit.branch_point = int32_t(matched.size()) * bs;
  }
  matched.resize(size_t(k));
  hit.pages = std::move(matched);
  hit.tokens = k * bs;
  return hit;
}

bool CacheManager::admit(Sequence& seq, const PrefixHit& hit, int32_t until) {
  if (states_.num_free_seq_slots() == 0) return false;
  int32_t reclaimed = 0;  // hit pages that sit on the free list now
  for (const PageId& p : hit.pages) reclaimed += blocks_.ref_count(p.block) == 0;
  const int32_t fresh = pages_for(until) - int32_t(hit.pages.size());
  if (fresh > blocks_.num_free() - reclaimed) return false;
  seq.block_table.clear();
  for (const PageId& p : hit.pages) {
    blocks_.acquire(p.block);
    seq.block_table.push_back(p.block);
  }
  const std::vector<int32_t> more = blocks_.allocate(fresh);
  seq.block_table.insert(seq.block_table.end(), more.begin(), more.end());
  seq.chain = hit.pages;
  seq.state_slot = states_.allocate();
  if (hit.snapshot_slot >= 0) {
    copy_state(hit.snapshot_slot, seq.state_slot);
    ++counters_.snapshots_restored;
  }
  seq.num_computed = hit.tokens;
  seq.branch_point = hit.branch_point;
  return true;
}

bool CacheManager::can_grow(const Sequence& seq, int32_t until) const {
  return pages_for(until) - int32_t(seq.block_table.size()) <= blocks_.num_free();
}

void CacheManager::grow(Sequence& seq, int32_t until) {
  const int32_t fresh = pages_for(until) - int32_t(seq.block_table.size());
  if (fresh <= 0) return;
  const std::vector<int32_t> more = blocks_.allocate(fresh);
  seq.block_table.insert(seq.block_table.end(), more.begin(), more.end());
}

bool CacheManager::is_snapshot_point(const Sequence& seq, int32_t pos) const {
  const int32_t bs = config_.block_size;
  if (pos <= 0 || pos % bs) return false;
  if (config_.state_interval > 0 && (pos / bs) % config_.state_interval == 0) return true;
  if (pos == (seq.prompt_len - 1) / bs * bs) return true;
  return pos == seq.branch_point;
}

int32_t CacheManager::cut_chunk(const Sequence& seq, int32_t from, int32_t to) const {
  if (!config_.prefix_caching || !has_state_ || config_.snapshot_slots == 0) return to;
  const int32_t bs = config_.block_size;
  for (int32_t p = (from / bs + 1) * bs; p < to; p += bs) {
    if (is_snapshot_point(seq, p)) return p;
  }
  return to;
}

void CacheManager::on_computed(Sequence& seq, bool sampled) {
  if (!config_.prefix_caching) return;
  const int32_t bs = config_.block_size;
  extend_page_hashes(seq.tokens, bs, seq.page_hashes);
  const size_t full = size_t(seq.num_computed / bs);
  while (seq.chain.size() < full) {
    const size_t i = seq.chain.size();
    const PageId parent = i ? seq.chain.back() : PageId{};
    seq.chain.push_back(blocks_.register_full(seq.block_table[i], seq.page_hashes[i],
                                              seq.tokens.data() + i * size_t(bs), parent));
  }
  const int32_t pos = seq.num_computed;
  if (!has_state_ || config_.snapshot_slots == 0 || pos == 0 || pos % bs) return;
  const size_t k = size_t(pos / bs) - 1;
  const uint64_t hash = seq.page_hashes[k];
  const PageId page = seq.chain[k];
  std::optional<StatePool::Store> store;
  if (is_snapshot_point(seq, pos)) {
    store = states_.store(hash, page);
  } else if (sampled) {
    // The tail snapshot moves forward: its previous position is superseded.
    const bool own = states_.holds(seq.tail_slot, seq.tail_hash, seq.tail_page);
    store = states_.store(hash, page, own ? seq.tail_slot : -1);
    if (store) {
      seq.tail_slot = store->slot;
      seq.tail_hash = hash;
      seq.tail_page = page;
    }
  }
  if (store && store->copy) {
    copy_state(seq.state_slot, store->slot);
    ++counters_.snapshots_stored;
  }
}

bool CacheManager::fork(const Sequence& parent, Sequence& child) {
  const int32_t bs = config_.block_size;
  const int32_t full = parent.num_computed / bs;
  const bool partial = parent.num_computed % bs != 0;
  if (states_.num_free_seq_slots() == 0 || (partial && blocks_.num_free() == 0)) return false;
  child.block_table.assign(parent.block_table.begin(), parent.block_table.begin() + full);
  for (int32_t b : child.block_table) blocks_.acquire(b);
  if (partial) {
    const int32_t b = blocks_.allocate(1)[0];
    copy_page(parent.block_table[size_t(full)], b);
    child.block_table.push_back(b);
  }
  child.chain = parent.chain;
  child.page_hashes = parent.page_hashes;
  child.state_slot = states_.allocate();
  copy_state(parent.state_slot, child.state_slot);
  child.num_computed = parent.num_computed;
  return true;
}

void CacheManager::free(Sequence& seq) {
  blocks_.release(seq.block_table);
  seq.block_table.clear();
  if (seq.state_slot >= 0) states_.release(seq.state_slot);
  seq.state_slot = -1;
  seq.chain.clear();
  seq.num_computed = 0;
  seq.drafts.clear();
  seq.draft_probs.clear();
  seq.head_pending = 0;
}

// Checkpoints follow the sequence and snapshot slots: sequence slot s keeps its own at
// seq_slots + snapshot_slots + s.
int32_t CacheManager::checkpoint_slot(const Sequence& seq) const {
  STRATA_CHECK(config_.speculative && seq.state_slot >= 0 && seq.state_slot < config_.seq_slots,
               "cache manager: no checkpoint slot for state slot ", seq.state_slot);
  return config_.seq_slots + config_.snapshot_slots + seq.state_slot * std::max(1, config_.state_steps);
}

ForwardBatch::StateSteps CacheManager::state_steps() const {
  if (!has_state_ || !config_.speculative || config_.state_steps == 0) return {};
  return {config_.seq_slots + config_.snapshot_slots, config_.state_steps};
}

void CacheManager::restore_step(const Sequence& seq, int32_t j) {
  STRATA_CHECK(j >= 0 && j < config_.state_steps, "cache manager: no per-token state ", j, " (", config_.state_steps,
               " a slot)");
  if (has_state_) copy_state(checkpoint_slot(seq) + j, seq.state_slot);
}

void CacheManager::restore_steps(const std::vector<const Sequence*>& seqs, const Tensor& accepted, int32_t verified) {
  if (!has_state_) return;
  STRATA_CHECK(verified > 0 && verified <= config_.state_steps, "cache manager: ", verified, " drafts verified, ",
               config_.state_steps, " per-token states a slot");
  flush_state_copies();  // the copies queued before go first
  std::vector<ops::SlotCopy> copies;
  for (const Sequence* seq : seqs) copies.push_back({checkpoint_slot(*seq), seq->state_slot});
  caches_.copy_slots_selected(copies, accepted, verified);
}

void CacheManager::checkpoint_state(const Sequence& seq) {
  if (has_state_) copy_state(seq.state_slot, checkpoint_slot(seq));
}

void CacheManager::restore_state(const Sequence& seq) {
  if (has_state_) copy_state(checkpoint_slot(seq), seq.state_slot);
}

void CacheManager::truncate(Sequence& seq, int32_t tokens) {
  const size_t keep = size_t(pages_for(tokens));
  STRATA_CHECK(tokens >= seq.num_computed, "cache manager: truncating below the computed tokens");
  if (seq.block_table.size() <= keep) return;
  blocks_.release(std::vector<int32_t>(seq.block_table.begin() + ptrdiff_t(keep), seq.block_table.end()));
  seq.block_table.resize(keep);
}

void CacheManager::clear_prefix_cache() {
  blocks_.clear_cache();
  states_.clear_snapshots();
}

CacheUsage CacheManager::usage() const {
  CacheUsage u;
  u.num_blocks = blocks_.num_blocks();
  u.free_blocks = blocks_.num_free();
  u.cached_blocks = blocks_.num_cached();
  u.used_blocks = u.num_blocks - u.free_blocks;  // a page is free exactly when unreferenced
  u.page_refs = blocks_.total_refs();
  u.seq_slots = states_.seq_slots();
  u.free_seq_slots = states_.num_free_seq_slots();
  u.snapshot_slots = states_.snapshot_slots();
  u.snapshots = states_.num_snapshots();
  return u;
}

}  // namespace strata
