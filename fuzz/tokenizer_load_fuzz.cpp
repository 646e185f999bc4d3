// Fuzzes tokenizer.json parsing: arbitrary bytes as tokenizer.json must load or fail with
// strata::Error; a tokenizer that loads must encode and decode without crashing, and stream
// decode must agree with decode. Seeds: fuzz/seeds/tokenizer/load/.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    strata::Tokenizer tok = strata::Tokenizer::from_json(text, "fuzz.json");
    for (std::string_view s : {"Hello world 123", " <s> x</s>  é e\xCC\x81 \xF0\x9F\x98\x80\n\n",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ""}) {
      std::vector<int32_t> ids = tok.encode(s, true);
      std::string dec = tok.decode(ids);
      strata::IncrementalDecoder inc(tok);
      std::string streamed;
      for (int32_t id : ids) streamed += inc.push(id);
      streamed += inc.finish();
      if (streamed != dec) std::abort();
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
