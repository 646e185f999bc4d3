#include "strata/models/model.h"

#include "strata/core/error.h"
#include "strata/ops/ops.h"

namespace strata {

size_t CacheSpec::bytes_per_block(int block_size) const {
  size_t b = 0;
  for (const LayerCacheSpec& l : layers) {
    for (const PagedCacheSpec& p : l.paged) {
      b += size_t(p.entries_per_block(block_size)) * size_t(shape_numel(p.per_entry)) * dtype_size(p.dtype);
    }
  }
  return b;
}

size_t CacheSpec::bytes_per_slot() const {
  size_t b = 0;
  for (const LayerCacheSpec& l : layers) {
    for (const SlotCacheSpec& s : l.slots) b += size_t(shape_numel(s.shape)) * dtype_size(s.dtype);
  }
  return b;
}

Caches Caches::allocate(const CacheSpec& spec, int num_blocks, int block_size, int num_slots,
                        Device device) {
  STRATA_CHECK(num_blocks >= 0 && block_size > 0 && num_slots >= 0, "caches: bad sizes ",
               num_blocks, " blocks of ", block_size, ", ", num_slots, " slots");
  Caches c;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.num_slots = num_slots;
  for (const LayerCacheSpec& l : spec.layers) {
    LayerCaches lc;
    for (const PagedCacheSpec& p : l.paged) {
      STRATA_CHECK(p.tokens_per_entry > 0 && (p.tokens_per_entry >= block_size ?
                   p.tokens_per_entry % block_size == 0 : block_size % p.tokens_per_entry == 0),
                   "caches: block size ", block_size, " and cache '", p.name, "' with ",
                   p.tokens_per_entry, " tokens per entry do not tile");
      Shape s{num_blocks, p.entries_per_block(block_size)};
      s.insert(s.end(), p.per_entry.begin(), p.per_entry.end());
      lc.paged.push_back(Tensor::zeros(s, p.dtype, device));
    }
    for (const SlotCacheSpec& sl : l.slots) {
      Shape s{num_slots};
      s.insert(s.end(), sl.shape.begin(), sl.shape.end());
      lc.slots.push_back(Tensor::zeros(s, sl.dtype, device));
    }
    c.layers.push_back(std::move(lc));
  }
  return c;
}

void Caches::copy_slot(int32_t src, int32_t dst) { copy_slots({{src, dst}}); }

void Caches::copy_slots(const std::vector<ops::SlotCopy>& copies) {
  std::vector<Tensor> pools;
  for (LayerCaches& l : layers) pools.insert(pools.end(), l.slots.begin(), l.slots.end());
  ops::copy_slots(pools, copies);
  for (Caches& p : peers) p.copy_slots(copies);
}

void Caches::copy_slots_selected(const std::vector<ops::SlotCopy>& copies, const Tensor& select, int32_t limit) {
  STRATA_CHECK(peers.empty(), "caches: a device-selected slot copy runs on one rank");
  std::vector<Tensor> pools;
  for (LayerCaches& l : layers) pools.insert(pools.end(), l.slots.begin(), l.slots.end());
  ops::copy_slots_selected(pools, copies, select, limit);
}

void Caches::copy_page(int32_t src, int32_t dst) {
  for (LayerCaches& l : layers) {
    for (const Tensor& t : l.paged) ops::copy_slot(t, src, dst);
  }
  for (Caches& p : peers) p.copy_page(src, dst);
}

Caches Model::allocate_caches(int num_blocks, int block_size, int num_slots) const {
  return Caches::allocate(info().cache, num_blocks, block_size, num_slots, device());
}

Caches Model::allocate_caches(int num_blocks, int block_size, int num_slots, bool with_mtp) const {
  if (!with_mtp) return allocate_caches(num_blocks, block_size, num_slots);
  STRATA_CHECK(info().mtp_layers > 0, info().model_type, ": no multi-token-prediction head is loaded");
  CacheSpec spec = info().cache;
  spec.layers.insert(spec.layers.end(), info().mtp_cache.begin(), info().mtp_cache.end());
  return Caches::allocate(spec, num_blocks, block_size, num_slots, device());
}

void Model::forward_with_hidden(const ForwardBatch&, Caches&, Tensor&, Tensor&) {
  fail(info().model_type, ": no multi-token-prediction head is loaded (or the family has none yet)");
}

void Model::mtp_forward(const ForwardBatch&, const Tensor&, Caches&, Tensor&) {
  fail(info().model_type, ": no multi-token-prediction head is loaded (or the family has none yet)");
}

void Model::mtp_forward_with_hidden(const ForwardBatch&, const Tensor&, Caches&, Tensor&, Tensor&) {
  fail(info().model_type, ": no multi-token-prediction head is loaded (or the family has none yet)");
}

void Model::mtp_write_kv(const ForwardBatch& batch, const Tensor& hidden, Caches& caches) {
  Tensor logits;
  mtp_forward(batch, hidden, caches, logits);
}

}  // namespace strata
