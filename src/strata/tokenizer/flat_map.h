// Open-addressing hash maps for the tokenizer's hot paths: byte strings to ids, and token-id
// pairs to merges. Keys of StrMap live in one arena; nothing is erased, only cleared.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tok {

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0x94d049bb133111ebull;
  }
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

inline uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Byte string -> V.
template <class V>
class StrMap {
 public:
  explicit StrMap(size_t expected = 16) { rehash(expected); }

  const V* find(std::string_view key) const {
    uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return nullptr;
      if (s.hash == uint32_t(h) && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), key.size()) == 0) {
        return &s.value;
      }
    }
  }

  // Inserts or overwrites.
  V* put(std::string_view key, const V& value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size());
    uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.len == kEmpty) {
        s.hash = uint32_t(h);
        s.off = arena_.size();
        s.len = uint32_t(key.size());
        s.value = value;
        arena_.append(key);
        ++size_;
        return &s.value;
      }
      if (s.hash == uint32_t(h) && s.len == key.size() &&
          std::memcmp(arena_.data() + s.off, key.data(), key.size()) == 0) {
        s.value = value;
        return &s.value;
      }
    }
  }

  size_t size() const { return size_; }
  size_t arena_bytes() const { return arena_.size(); }
  void clear() {
    for (Slot& s : slots_) s.len = kEmpty;
    arena_.clear();
    size_ = 0;
  }

 private:
  static constexpr uint32_t kEmpty = 0xffffffffu;
  struct Slot {
    uint32_t hash = 0;
    uint32_t len = kEmpty;
    size_t off = 0;
    V value{};
  };

  void rehash(size_t min_slots) {
    size_t n = 16;
    while (n < min_slots * 2) n <<= 1;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    for (const Slot& s : old) {
      if (s.len == kEmpty) continue;
      uint64_t h = hash_bytes(arena_.data() + s.off, s.len);
      size_t i = h & mask_;
      while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// (left id, right id) -> merge.
struct Merge {
  int32_t rank;
  int32_t new_id;
};

class PairMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Merge{0, 0});
    mask_ = cap - 1;
  }
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  const Merge* find(int32_t a, int32_t b) const {
    uint64_t k = key(a, b);
    for (size_t i = hash_u64(k) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  // Inserts or overwrites (a later duplicate merge wins, as in HF's HashMap collect).
  void put(int32_t a, int32_t b, Merge m) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    uint64_t k = key(a, b);
    for (size_t i = hash_u64(k) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == k) {
        values_[i] = m;
        return;
      }
      if (keys_[i] == kEmpty) {
        keys_[i] = k;
        values_[i] = m;
        ++size_;
        return;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  void grow() {
    std::vector<uint64_t> ok = std::move(keys_);
    std::vector<Merge> ov = std::move(values_);
    reserve(ok.empty() ? 16 : ok.size());
    size_ = 0;
    for (size_t i = 0; i < ok.size(); ++i) {
      if (ok[i] != kEmpty) put(int32_t(ok[i] >> 32), int32_t(uint32_t(ok[i])), ov[i]);
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace strata::tok
