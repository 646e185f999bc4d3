// from_json_schema against ajv: every instance of tests/grammar/corpus.json (canonical form) is
// accepted by the schema's grammar exactly when ajv's committed verdict (verdicts.json, checked
// against ajv by the grammar_ajv_verdicts ctest test) says it is valid.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "strata/core/error.h"
#include "strata/grammar/json_schema.h"
#include "strata/grammar/matcher.h"

namespace {

using namespace strata::grammar;
using json = nlohmann::ordered_json;
const std::filesystem::path kDir = std::filesystem::path(STRATA_SOURCE_DIR) / "tests" / "grammar";

json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << p << " is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_token(text) && m.can_end();
}

TEST(GrammarJsonSchema, CorpusAgreesWithAjv) {
  json corpus = read_json(kDir / "corpus.json");
  json verdicts = read_json(kDir / "verdicts.json");
  ASSERT_GE(corpus.size(), 100u);
  size_t instances = 0, valid = 0;
  for (const json& c : corpus) {
    std::string name = c["name"].get<std::string>();
    ASSERT_TRUE(verdicts.contains(name)) << name;
    std::shared_ptr<const Grammar> g;
    try {
      g = std::make_shared<Grammar>(from_json_schema(c["schema"].dump()));
    } catch (const strata::Error& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    const json& expect = verdicts[name];
    ASSERT_EQ(expect.size(), c["instances"].size()) << name;
    for (size_t i = 0; i < expect.size(); ++i) {
      std::string text = c["instances"][i].get<std::string>();
      EXPECT_EQ(accepts(g, text), expect[i].get<bool>())
          << name << ": " << text << " (ajv: " << (expect[i].get<bool>() ? "valid" : "invalid") << ")";
      ++instances;
      valid += expect[i].get<bool>();
    }
  }
  std::printf("corpus: %zu schemas, %zu instances, %zu valid\n", corpus.size(), instances, valid);
}

TEST(GrammarJsonSchema, JsonObjectAcceptsAnyObjectOnly) {
  auto g = std::make_shared<Grammar>(json_object_grammar());
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_TRUE(accepts(g, R"({"a":[1,{"b":null}],"c":"\u00e9"})"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, R"({"a":})"));
  EXPECT_FALSE(accepts(g, "{} "));
}

std::string error_of(const std::string& schema) {
  try {
    from_json_schema(schema);
  } catch (const strata::Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(GrammarJsonSchema, UnsupportedKeywordsAreRefusedByName) {
  for (const char* kw : {"minimum", "maximum", "exclusiveMinimum", "multipleOf", "pattern",
                         "oneOf", "not", "if", "patternProperties", "uniqueItems", "contains",
                         "propertyNames", "dependentRequired", "minProperties"}) {
    std::string schema = std::string(R"({"type": "object", "properties": {"a": {")") + kw + R"(": 1}}})";
    EXPECT_EQ(error_of(schema), std::string("json schema: /properties/a: unsupported keyword '") + kw + "'");
  }
  EXPECT_EQ(error_of(R"({"type": "string", "format": "email"})"),
            "json schema: /: unsupported string format 'email'");
  EXPECT_EQ(error_of(R"({"allOf": [{"type": "string"}, {"minLength": 1}]})"),
            "json schema: /: 'allOf' is supported with exactly one schema");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/missing"})"),
            "json schema: /: '$ref' target '#/$defs/missing' does not exist");
  EXPECT_EQ(error_of(R"({"$ref": "http://example.com/s.json"})"),
            "json schema: /: '$ref' to 'http://example.com/s.json' is not supported "
            "(only #/$defs/NAME and #/definitions/NAME)");
  EXPECT_EQ(error_of(R"({"type": "strin"})"), "json schema: /: unknown type 'strin'");
  EXPECT_EQ(error_of(R"({"type": "array", "items": [{"type": "string"}]})"),
            "json schema: /: 'items' as an array (draft 4-7 tuples) is not supported: use 'prefixItems'");
  EXPECT_EQ(error_of(R"({"type": "string", "maxLength": -1})"),
            "json schema: /: 'maxLength' must be a non-negative integer");
  EXPECT_EQ(error_of("{"), "json schema: not valid JSON");
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "json schema: /: required property 'b' is not in 'properties' (not supported)");
}

}  // namespace
