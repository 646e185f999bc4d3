// from_json_schema against ajv: every instance of tests/grammar/corpus.json (canonical form, and
// whitespace forms) is accepted by the schema's grammar exactly when ajv's committed verdict
// (verdicts.json, checked against ajv by the grammar_ajv_verdicts ctest test) says it is valid;
// the canonical grammar (JsonWhitespace::kNone) accepts exactly the valid ones without whitespace
// outside strings. And the whitespace bound, and whitespace outside the value, are refused.
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

// Whether the text has JSON whitespace outside its strings.
bool has_whitespace(const std::string& text) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      return true;
    }
  }
  return false;
}

TEST(GrammarJsonSchema, CorpusAgreesWithAjv) {
  json corpus = read_json(kDir / "corpus.json");
  json verdicts = read_json(kDir / "verdicts.json");
  ASSERT_GE(corpus.size(), 100u);
  size_t instances = 0, valid = 0;
  for (const json& c : corpus) {
    std::string name = c["name"].get<std::string>();
    ASSERT_TRUE(verdicts.contains(name)) << name;
    std::shared_ptr<const Grammar> g, canonical;
    try {
      g = std::make_shared<Grammar>(from_json_schema(c["schema"].dump()));
      canonical = std::make_shared<Grammar>(from_json_schema(c["schema"].dump(), JsonWhitespace::kNone));
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
      EXPECT_EQ(accepts(canonical, text), expect[i].get<bool>() && !has_whitespace(text))
          << name << " (canonical): " << text;
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

TEST(GrammarJsonSchema, WhitespaceRunsAreBounded) {
  auto object = std::make_shared<Grammar>(json_object_grammar());
  auto schema = std::make_shared<Grammar>(from_json_schema(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"additionalProperties":false})"));
  const std::string sp(kMaxJsonSpaces, ' ');
  const std::string max = sp + "\r\n" + sp + "\n" + sp;  // the longest run
  const std::string indent = "\n" + std::string(kMaxJsonSpaces - 2, ' ') + "\t\t";
  for (const auto& g : {object, schema}) {
    for (const std::string& ws : {max, indent, sp, std::string("\n\n"), std::string("\r\n\t \t")}) {
      EXPECT_TRUE(accepts(g, "{" + ws + "}")) << ws.size();
      EXPECT_TRUE(accepts(g, "{" + ws + R"("a")" + ws + ":" + ws + "[" + ws + "1" + ws + "," + ws + "2" + ws +
                             "]" + ws + "}"));
    }
    // Beyond the bounds: a space or tab too many on a line, a third line break, a lone \r.
    for (const std::string& ws : {sp + " ", indent + " ", max + "\t", sp + "\n" + sp + " ", std::string("\n\n\n"),
                                  std::string(" \n \n \n "), std::string("\r"), std::string("\n\r")}) {
      EXPECT_FALSE(accepts(g, "{" + ws + "}")) << ws.size();
      EXPECT_FALSE(accepts(g, R"({"a":[1,)" + ws + "2]}")) << ws.size();
      EXPECT_FALSE(accepts(g, R"({"a")" + ws + ":[]}")) << ws.size();
    }
    // Nothing before or after the value: a complete value ends the output.
    EXPECT_FALSE(accepts(g, " {}"));
    EXPECT_FALSE(accepts(g, "{}\n"));
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_token("{ }"));
    EXPECT_TRUE(m.is_terminated());
    // Not JSON whitespace, or inside a token.
    for (const char* bad : {"{\f}", "{\v}", "{\xC2\xA0}", R"({"a":[1 2]})", R"({"a":[- 1]})", R"({"a":[1 .5]})",
                            R"({"a" "b"})", R"({ "a": [1], })"})
      EXPECT_FALSE(accepts(g, bad)) << bad;
  }
  auto literals = std::make_shared<Grammar>(from_json_schema(R"({"enum":[true,null,12,{"k":[1]}]})"));
  EXPECT_TRUE(accepts(literals, "{ \"k\" :\n  [ 1 ]\n}"));
  for (const char* bad : {"tr ue", "nu ll", "1 2", "{\"k\":[1 ,]}", " true", "12 "})
    EXPECT_FALSE(accepts(literals, bad)) << bad;
  // The canonical form takes none.
  auto canonical = std::make_shared<Grammar>(json_object_grammar(JsonWhitespace::kNone));
  EXPECT_TRUE(accepts(canonical, R"({"a":[1,{"b":null}]})"));
  EXPECT_FALSE(accepts(canonical, R"({"a": 1})"));
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
