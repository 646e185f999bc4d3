// The engine's building blocks on their own: BlockPool, StatePool, byte sizes, the memory plan.
#include <gtest/gtest.h>

#include <numeric>

#include "strata/core/error.h"
#include "strata/engine/block_pool.h"
#include "strata/engine/memory_budget.h"
#include "strata/engine/prefix_hash.h"
#include "strata/engine/state_pool.h"

namespace strata {
namespace {

std::vector<int32_t> page_tokens(int32_t first, int32_t bs = 4) {
  std::vector<int32_t> t(static_cast<size_t>(bs));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(EngineBlockPool, RefCountsAndFreeList) {
  BlockPool pool(8, 4);
  EXPECT_EQ(pool.num_free(), 8);
  std::vector<int32_t> a = pool.allocate(3);
  EXPECT_EQ(pool.num_free(), 5);
  for (int32_t b : a) EXPECT_EQ(pool.ref_count(b), 1);
  pool.acquire(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  EXPECT_EQ(pool.total_refs(), 4);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free(), 7);
  pool.release({a[0]});
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.total_refs(), 0);
  EXPECT_THROW(pool.release({a[0]}), Error);
  EXPECT_THROW(pool.allocate(9), Error);
}

TEST(EngineBlockPool, PrefixLookupIsExact) {
  BlockPool pool(8, 4);
  const auto t0 = page_tokens(10), t1 = page_tokens(20);
  std::vector<int32_t> b = pool.allocate(2);
  const uint64_t h0 = page_hash(kRootPrefixHash, t0.data(), 4), h1 = page_hash(h0, t1.data(), 4);
  const PageId p0 = pool.register_full(b[0], h0, t0.data(), PageId{});
  const PageId p1 = pool.register_full(b[1], h1, t1.data(), p0);
  EXPECT_EQ(p0.block, b[0]);
  ASSERT_TRUE(pool.lookup(h0, t0.data(), PageId{}).has_value());
  ASSERT_TRUE(pool.lookup(h1, t1.data(), p0).has_value());
  // Same hash, different tokens (a forced collision): a miss, never a wrong page.
  const auto other = page_tokens(30);
  EXPECT_FALSE(pool.lookup(h0, other.data(), PageId{}).has_value());
  // Right tokens under another parent: a miss.
  EXPECT_FALSE(pool.lookup(h1, t1.data(), PageId{}).has_value());
  // A duplicate registration returns the cached page and leaves the new one uncached.
  std::vector<int32_t> c = pool.allocate(1);
  EXPECT_EQ(pool.register_full(c[0], h0, t0.data(), PageId{}), p0);
  EXPECT_FALSE(pool.is_cached(c[0]));
  pool.release(c);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.num_cached(), 2);
  // Still found while free; taking every page evicts them, and their child link dies with the
  // parent's generation.
  EXPECT_EQ(pool.lookup(h1, t1.data(), p0), p1);
  std::vector<int32_t> all = pool.allocate(8);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.lookup(h0, t0.data(), PageId{}).has_value());
  pool.release(all);
}

TEST(EngineBlockPool, EvictsUncachedFirstThenLeastRecentlyUsed) {
  BlockPool pool(4, 4);
  std::vector<int32_t> b = pool.allocate(4);
  const auto t0 = page_tokens(0), t1 = page_tokens(100);
  const uint64_t h0 = page_hash(kRootPrefixHash, t0.data(), 4);
  const uint64_t h1 = page_hash(kRootPrefixHash, t1.data(), 4);
  pool.register_full(b[0], h0, t0.data(), PageId{});
  pool.register_full(b[1], h1, t1.data(), PageId{});
  std::vector<uint64_t> evicted;
  pool.on_evict = [&](PageId, uint64_t h) { evicted.push_back(h); };
  pool.release({b[1]});  // cached, freed first: least recently used
  pool.release({b[0]});  // cached
  pool.release({b[2], b[3]});  // uncached
  // Uncached pages go first, then b[1], then b[0].
  std::vector<int32_t> got = pool.allocate(3);
  EXPECT_EQ(got[0] == b[2] || got[0] == b[3], true);
  EXPECT_EQ(got[1] == b[2] || got[1] == b[3], true);
  EXPECT_EQ(got[2], b[1]);
  EXPECT_EQ(evicted, std::vector<uint64_t>{h1});
  EXPECT_TRUE(pool.lookup(h0, t0.data(), PageId{}).has_value());
  pool.release(got);
  pool.clear_cache();
  EXPECT_EQ(pool.num_cached(), 0);
}

TEST(EngineStatePool, SnapshotLruAndBinding) {
  StatePool pool(2, 2);
  EXPECT_EQ(pool.num_slots(), 4);
  const int32_t a = pool.allocate(), b = pool.allocate();
  EXPECT_NE(a, b);
  EXPECT_THROW(pool.allocate(), Error);
  pool.release(a);
  EXPECT_THROW(pool.release(a), Error);
  const PageId p1{1, 1}, p2{2, 1}, p3{3, 1};
  auto s1 = pool.store(11, p1);
  ASSERT_TRUE(s1 && s1->copy);
  EXPECT_GE(s1->slot, 2);
  auto again = pool.store(11, p1);
  EXPECT_FALSE(again->copy);  // kept already
  auto s2 = pool.store(22, p2);
  EXPECT_NE(s2->slot, s1->slot);
  EXPECT_TRUE(pool.find(11, p1).has_value());  // 11 is now the most recently used
  EXPECT_FALSE(pool.find(11, PageId{1, 2}).has_value());  // another generation of the page
  auto s3 = pool.store(33, p3);                 // evicts 22
  EXPECT_EQ(s3->slot, s2->slot);
  EXPECT_FALSE(pool.find(22, p2).has_value());
  // Re-keying a slot the caller owns.
  auto s4 = pool.store(44, p1, s3->slot);
  EXPECT_EQ(s4->slot, s3->slot);
  EXPECT_FALSE(pool.find(33, p3).has_value());
  pool.drop(44, p1);
  EXPECT_EQ(pool.num_snapshots(), 1);
  pool.clear_snapshots();
  EXPECT_EQ(pool.num_snapshots(), 0);
  pool.release(b);
  EXPECT_EQ(pool.num_free_seq_slots(), 2);
}

TEST(EngineMemory, ByteSizes) {
  EXPECT_EQ(parse_byte_size("4096", "--kv-cache-memory"), 4096u);
  EXPECT_EQ(parse_byte_size("512M", "--kv-cache-memory"), size_t(512) << 20);
  EXPECT_EQ(parse_byte_size("4G", "--kv-cache-memory"), size_t(4) << 30);
  EXPECT_EQ(parse_byte_size("1.5GiB", "--kv-cache-memory"), size_t(3) << 29);
  EXPECT_EQ(parse_byte_size("2k", "--kv-cache-memory"), 2048u);
  for (const char* bad : {"", "G", "12X", "-5", "1.2.3", "0", "4 G"}) {
    try {
      parse_byte_size(bad, "--kv-cache-memory");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-cache-memory"), std::string::npos) << e.what();
    }
  }
}

// An attention layer (k and v of [2, 8] float32 a token: 2 KiB a page of 16) and a recurrent
// layer (a [state, state] float32 slot); with `attention_only`, the attention layer alone.
CacheSpec attention_and_state_spec(int64_t state, bool attention_only = false) {
  CacheSpec spec;
  LayerCacheSpec attn, gdn;
  attn.paged.push_back({"k", {2, 8}, DType::kF32});
  attn.paged.push_back({"v", {2, 8}, DType::kF32});
  gdn.slots.push_back({"ssm", {state, state}, DType::kF32});
  spec.layers = {attn};
  if (!attention_only) spec.layers.push_back(gdn);
  return spec;
}

TEST(EngineMemory, PlanSplitsTheBudget) {
  const CacheSpec spec = attention_and_state_spec(4);
  MemoryRequest r;
  r.kv_cache_memory = 1 << 20;
  r.block_size = 16;
  r.max_num_seqs = 4;
  r.snapshot_slots = 4;
  const MemoryPlan p = plan_memory(spec, r, Device::kCpu);
  EXPECT_EQ(p.bytes_per_block, 2u * 16 * 16 * 4);
  EXPECT_EQ(p.bytes_per_slot, 64u);
  EXPECT_EQ(p.num_blocks, int32_t(((1 << 20) - 8 * 64) / (2 * 16 * 16 * 4)));
  EXPECT_EQ(p.seq_slots + p.snapshot_slots, 8);
  r.kv_cache_memory = 600;  // the slots fit, no page does
  EXPECT_THROW(plan_memory(spec, r, Device::kCpu), Error);
  r.kv_cache_memory = 1 << 20;
  r.gpu_memory_utilization = 1.5;
  EXPECT_THROW(plan_memory(spec, r, Device::kCpu), Error);
}

// Without --kv-cache-memory on the CPU: kCpuDefaultSequences sequences of max_model_len tokens
// (pages, a state slot and a snapshot slot each), not a fixed 1 GiB.
TEST(EngineMemory, CpuDefaultIsSizedFromTheModelAndItsContext) {
  const CacheSpec spec = attention_and_state_spec(4);
  MemoryRequest r;
  r.block_size = 16;
  r.max_num_seqs = 256;
  r.snapshot_slots = 256;
  r.max_model_len = 1000;  // 63 pages
  const MemoryPlan p = plan_memory(spec, r, Device::kCpu);
  EXPECT_EQ(p.seq_slots, kCpuDefaultSequences);
  EXPECT_EQ(p.snapshot_slots, kCpuDefaultSequences);
  EXPECT_EQ(p.num_blocks, kCpuDefaultSequences * 63);
  EXPECT_EQ(p.budget, size_t(kCpuDefaultSequences) * 63 * p.bytes_per_block + 2 * kCpuDefaultSequences * 64);
  EXPECT_NE(p.describe().find("--max-num-seqs 256 runs at most 8 sequences"), std::string::npos) << p.describe();
  r.max_num_seqs = 2;  // fewer sequences asked: fewer held
  r.snapshot_slots = 0;
  const MemoryPlan two = plan_memory(spec, r, Device::kCpu);
  EXPECT_EQ(two.num_blocks, 2 * 63);
  EXPECT_EQ(two.seq_slots, 2);
  EXPECT_EQ(two.snapshot_slots, 0);
  EXPECT_EQ(two.describe().find("lowered"), std::string::npos) << two.describe();
  // No state: the slot count is free and stays max_num_seqs.
  r.max_num_seqs = 256;
  EXPECT_EQ(plan_memory(attention_and_state_spec(4, true), r, Device::kCpu).seq_slots, 256);
}

// A budget too small for the slots asked lowers the snapshot slots to what fits in half of it
// beside the sequence slots, then, when those alone do not fit, the sequence slots to half of it,
// and says so; when not even one slot and a page fit, the error names the flag.
TEST(EngineMemory, SmallBudgetLowersTheSlotsTogether) {
  const CacheSpec spec = attention_and_state_spec(16);  // 2 KiB a page, 1 KiB a slot
  MemoryRequest r;
  r.block_size = 16;
  r.max_num_seqs = 64;
  r.snapshot_slots = 64;
  r.max_model_len = 4096;
  r.kv_cache_memory = 60 * 1024;  // 128 slots asked, 60 KiB
  MemoryPlan p = plan_memory(spec, r, Device::kCpu);
  EXPECT_EQ(p.seq_slots, 30);
  EXPECT_EQ(p.snapshot_slots, 0);
  EXPECT_EQ(p.num_blocks, 15);
  EXPECT_NE(p.describe().find("--prefix-state-slots lowered from 64 to 0 to fit; --max-num-seqs 64 lowered to 30"),
            std::string::npos)
      << p.describe();
  EXPECT_NE(p.describe().find("less than one sequence of --max-model-len 4096"), std::string::npos) << p.describe();
  r.kv_cache_memory = 80 * 1024;  // the sequences fit, only the snapshots are lowered
  r.max_num_seqs = 30;
  p = plan_memory(spec, r, Device::kCpu);
  EXPECT_EQ(p.seq_slots, 30);
  EXPECT_EQ(p.snapshot_slots, 10);
  r.kv_cache_memory = 1024;  // not one slot and one page
  try {
    plan_memory(spec, r, Device::kCpu);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-memory 1.00 KiB cannot hold one state slot"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
