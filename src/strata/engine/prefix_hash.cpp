#include "strata/engine/prefix_hash.h"

// Header-only use of Debian's libxxhash-dev: no library to link.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

uint64_t page_hash(uint64_t parent_hash, const int32_t* tokens, int32_t block_size) {
  return XXH3_64bits_withSeed(tokens, size_t(block_size) * sizeof(int32_t), parent_hash);
}

void extend_page_hashes(const std::vector<int32_t>& tokens, int32_t block_size,
                        std::vector<uint64_t>& hashes) {
  const size_t full = tokens.size() / size_t(block_size);
  while (hashes.size() < full) {
    const uint64_t parent = hashes.empty() ? kRootPrefixHash : hashes.back();
    hashes.push_back(page_hash(parent, tokens.data() + hashes.size() * size_t(block_size), block_size));
  }
}

}  // namespace strata
