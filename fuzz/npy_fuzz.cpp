// Fuzzes the .npy decoder; what it accepts must survive an encode/decode round trip bit for bit.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "strata/core/error.h"
#include "strata/io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  strata::Tensor t;
  try {
    t = strata::decode_npy(bytes, "fuzz.npy");
  } catch (const strata::Error&) {
    return 0;
  }
  strata::Tensor back = strata::decode_npy(strata::encode_npy(t), "round trip");
  if (back.shape() != t.shape() ||
      (t.nbytes() > 0 && std::memcmp(back.raw(), t.raw(), t.nbytes()) != 0))
    __builtin_trap();
  return 0;
}
