// libFuzzer target: arbitrary bytes as a grammar source. The first byte picks the front end
// (GBNF, regex, JSON schema), the rest is its text; a grammar that compiles is then run over
// the input's bytes and a few fixed strings, token by token, with rollbacks. Every failure must
// be a strata::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "strata/core/error.h"
#include "strata/grammar/grammar.h"
#include "strata/grammar/json_schema.h"
#include "strata/grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::shared_ptr<const strata::grammar::Grammar> g;
  try {
    switch (data[0] % 3) {
      case 0: g = std::make_shared<strata::grammar::Grammar>(strata::grammar::from_gbnf(text)); break;
      case 1: g = std::make_shared<strata::grammar::Grammar>(strata::grammar::from_regex(text)); break;
      default: g = std::make_shared<strata::grammar::Grammar>(strata::grammar::from_json_schema(text)); break;
    }
  } catch (const strata::Error&) {
    return 0;
  }
  strata::grammar::GrammarMatcher m(g, 8);
  for (std::string_view probe : {text, std::string_view("{\"a\":[1,\"x\"]}"), std::string_view("abc 123")}) {
    for (size_t i = 0; i < probe.size() && i < 256; i += 3) {
      m.accept_token(probe.substr(i, 3));
      if (m.rollback_depth() > 4) m.rollback(2);
    }
    (void)m.can_end();
    m.reset();
  }
  return 0;
}
