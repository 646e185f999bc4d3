// ServerState::structured_output: requests whose grammars are the same share one constraint
// (and so its filled masks); different grammars do not; the oldest is dropped past the bound.
#include <gtest/gtest.h>

#include <filesystem>

#include "strata/grammar/json_schema.h"
#include "strata/server/server_state.h"

namespace strata::server {
namespace {

TEST(GuidedCache, SameGrammarSharesItsConstraint) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/models/default";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << dir << " has no tokenizer.json";
  ServerState st;
  st.tokenizer.emplace(Tokenizer::load(dir));
  st.eos_ids = {0};
  auto schema = [](int n) {
    return std::make_shared<const grammar::Grammar>(
        grammar::from_json_schema(R"({"type":"array","maxItems":)" + std::to_string(n) + "}"));
  };
  EXPECT_EQ(st.structured_output(nullptr), nullptr);
  auto a = st.structured_output(schema(2));
  auto b = st.structured_output(schema(2));  // parsed again: an equal grammar
  auto c = st.structured_output(schema(3));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a->vocab, c->vocab);  // one vocabulary per server
  for (int n = 4; n < 4 + int(ServerState::kCachedGrammars); ++n) st.structured_output(schema(n));
  EXPECT_EQ(st.grammars.size(), ServerState::kCachedGrammars);
  EXPECT_NE(st.structured_output(schema(2)), a);  // dropped, built anew
}

}  // namespace
}  // namespace strata::server
