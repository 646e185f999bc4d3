// CacheManager: the engine's cache pools (the Caches the model reads and writes, the BlockPool
// of pages and the StatePool of slots) and the prefix-caching policy for hybrid models.
//
// Prefix caching. Full pages are shared by chained hash. A recurrent state cannot be rebuilt
// from pages, so it is checkpointed at page boundaries into snapshot slots (an LRU), keyed by
// the last page they cover. A sequence resumes from the deepest boundary that has both its
// pages cached and a snapshot (at least one token is always computed, for the logits).
// Snapshot points, in tokens (all multiples of the page size):
//   - every `state_interval` pages (0: off);
//   - the last page boundary before the prompt's last token (repeats of a prompt, n > 1);
//   - the branch point: where a prompt leaves the cached pages when that is deeper than its
//     snapshot hit, so that the next request sharing this prefix resumes there;
//   - every page boundary a sampling step reaches (decode): one "tail" snapshot per sequence,
//     re-keyed as it advances, so the next turn of a chat resumes near the end of this one.
// The scheduler ends prefill chunks at these points so the state exists after the step.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/engine/block_pool.h"
#include "strata/engine/sequence.h"
#include "strata/engine/state_pool.h"
#include "strata/models/model.h"

namespace strata {

struct CacheConfig {
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t seq_slots = 0;
  int32_t snapshot_slots = 0;
  bool prefix_caching = true;
  int32_t state_interval = 0;  // pages between interval snapshots; 0: off
  // Speculative decoding: the pools hold the draft head's layers too (allocate_caches with
  // with_mtp), and every sequence slot has a checkpoint slot for the state before a verify, or,
  // with state_steps > 0 (the model stores per-token states: ModelInfo::state_step_tokens),
  // state_steps slots for the states after each of a verify's tokens but the last (the first
  // of them doubles as the checkpoint).
  bool speculative = false;
  int32_t state_steps = 0;
};

struct PrefixHit {
  int32_t tokens = 0;               // resume point: tokens served from the cache
  std::vector<PageId> pages;        // the cached pages reused (tokens / block_size of them)
  int32_t snapshot_slot = -1;       // the state to restore (-1: start from zeros)
  int32_t branch_point = 0;         // see the file comment
};

struct CacheUsage {
  int32_t num_blocks = 0, free_blocks = 0, cached_blocks = 0, used_blocks = 0;
  int64_t page_refs = 0;  // references held on pages, by all sequences
  int32_t seq_slots = 0, free_seq_slots = 0, snapshot_slots = 0, snapshots = 0;
};

struct CacheCounters {
  int64_t snapshots_stored = 0, snapshots_restored = 0, pages_copied = 0;
};

class CacheManager {
 public:
  // The pools come from model.allocate_caches (a tensor-parallel model's carry every rank's).
  CacheManager(const Model& model, const CacheConfig& config);

  // The pools, with every state copy decided so far queued on their device.
  Caches& caches() {
    flush_state_copies();
    return caches_;
  }
  const CacheConfig& config() const { return config_; }
  bool has_state() const { return has_state_; }
  int32_t pages_for(int64_t tokens) const {
    return int32_t((tokens + config_.block_size - 1) / config_.block_size);
  }

  // The deepest usable cached prefix of seq's tokens (read-only apart from LRU order).
  PrefixHit find_prefix(Sequence& seq);
  // Gives a waiting sequence the hit's pages, a state slot and the pages to hold `until`
  // tokens. False (nothing changed) when the pages or the slot are not there.
  bool admit(Sequence& seq, const PrefixHit& hit, int32_t until);
  bool can_grow(const Sequence& seq, int32_t until) const;
  void grow(Sequence& seq, int32_t until);  // pages to hold `until` tokens
  // The end of a chunk that starts at `from` and wants to end at `to`: the first snapshot
  // point in (from, to), else `to`.
  int32_t cut_chunk(const Sequence& seq, int32_t from, int32_t to) const;
  // After a step computed seq's tokens up to seq.num_computed: registers new full pages and
  // takes the snapshot due at this point. `sampled`: the step produced a token.
  void on_computed(Sequence& seq, bool sampled);
  // Completion `child` shares `parent`'s computed prompt: full pages by reference, a copy of a
  // partly filled last page and of the state. False when a page or slot is missing.
  bool fork(const Sequence& parent, Sequence& child);
  void free(Sequence& seq);  // its pages and slot go back (cached pages stay reusable); drafts dropped

  // Speculative decoding (config.speculative): the state of seq's slot before a verify pass is
  // kept in the slot's checkpoint; restore_state puts it back (the rejected drafts' state
  // updates are undone, the accepted tokens are then replayed). truncate gives back the pages
  // beyond the first `tokens` tokens (what rejected drafts were given).
  void checkpoint_state(const Sequence& seq);
  void restore_state(const Sequence& seq);
  void truncate(Sequence& seq, int32_t tokens);
  // With config.state_steps: where a verify stores its per-token states (ForwardBatch::
  // state_steps), and the rollback that keeps a verify's first j + 1 tokens: the state stored
  // after token j becomes the slot's (no replay).
  ForwardBatch::StateSteps state_steps() const;
  void restore_step(const Sequence& seq, int32_t j);
  // restore_step for each of `seqs` with j = accepted[i] on the device (I32 [seqs.size()]) of the
  // `verified` drafts each verified (<= state_steps), where j < verified (j == verified: every draft
  // kept, nothing to restore).
  void restore_steps(const std::vector<const Sequence*>& seqs, const Tensor& accepted, int32_t verified);

  void clear_prefix_cache();
  CacheUsage usage() const;
  const CacheCounters& counters() const { return counters_; }

 private:
  bool is_snapshot_point(const Sequence& seq, int32_t pos) const;
  int32_t checkpoint_slot(const Sequence& seq) const;
  // State copies wait in pending_copies_ and go out together (one launch for a step's
  // snapshots); one that touches a slot a waiting copy writes, or writes one it reads, sends
  // the waiting ones first, so the order of dependent copies holds.
  void copy_state(int32_t src, int32_t dst);
  void flush_state_copies();
  void copy_page(int32_t src, int32_t dst);

  CacheConfig config_;
  bool has_state_ = false;
  Caches caches_;
  BlockPool blocks_;
  StatePool states_;
  CacheCounters counters_;
  std::vector<ops::SlotCopy> pending_copies_;
};

}  // namespace strata
