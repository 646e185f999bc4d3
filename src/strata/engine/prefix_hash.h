// Chained hashes of full pages for the prefix cache: the hash of page i covers its block_size
// token ids and the hash of page i - 1, so equal hashes name equal prefixes (up to 64-bit
// collisions, which the BlockPool's token and parent checks turn into misses).
#pragma once

#include <cstdint>
#include <vector>

namespace strata {

constexpr uint64_t kRootPrefixHash = 0x9e3779b97f4a7c15ull;

// XXH3-64 of the page's ids, seeded with the parent page's hash.
uint64_t page_hash(uint64_t parent_hash, const int32_t* tokens, int32_t block_size);

// Extends `hashes` to cover every full page of `tokens`.
void extend_page_hashes(const std::vector<int32_t>& tokens, int32_t block_size,
                        std::vector<uint64_t>& hashes);

}  // namespace strata
