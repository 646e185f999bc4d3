// JSON schema -> grammar of the JSON texts that the schema accepts, object properties in the
// order of the schema's `properties`, then any additional ones (docs/GRAMMAR.md lists the
// supported keywords; every other keyword is refused).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "strata/grammar/grammar.h"

namespace strata::grammar {

// Where the JSON grammars allow whitespace.
enum class JsonWhitespace {
  // JSON whitespace (space, \t, \n, \r) after `{`, `[`, `,` and `:`, and before `}`, `]`, `:`
  // and `,`, as RFC 8259 allows it, in bounded runs: at most kMaxJsonLineBreaks line breaks
  // ("\n" or "\r\n"), with at most kMaxJsonSpaces spaces and tabs before the first and after each.
  // None before or after the whole value, so the output ends with the value's last character.
  // Pretty-printed JSON (`{"a": 1}`, indented lines) is accepted. vLLM's default (xgrammar's
  // any_whitespace).
  kFlexible,
  // Canonical: no whitespace at all (`{"a":1,"b":[1,2]}`, what JSON.stringify writes).
  kNone,
};

// The bounds of a kFlexible whitespace run (as llama.cpp's json-schema-to-grammar bounds its
// `space` rule): an indentation of 4 to depth 6 or of 2 to depth 12, and one blank line. They
// keep a model from writing whitespace forever (a small model otherwise fills every gap with
// newlines), and keep the grammar and its token masks small.
constexpr int kMaxJsonSpaces = 24;
constexpr int kMaxJsonLineBreaks = 2;

// The schema as GBNF text (root rule `root`). Throws strata::Error naming the keyword and the
// schema path (e.g. "json schema: /properties/a: unsupported keyword 'pattern'").
std::string json_schema_to_gbnf(std::string_view schema_json,
                                JsonWhitespace ws = JsonWhitespace::kFlexible);
Grammar from_json_schema(std::string_view schema_json, JsonWhitespace ws = JsonWhitespace::kFlexible);

// Several JSON values in one grammar, for grammars that embed them in other text (the
// Qwen3-Coder XML tool calls): rule `name` accepts the JSON texts of the subschema at JSON
// pointer `pointer` of `schema_json` ("" for the whole; its `$ref`s resolve against the whole).
// The rules a subschema makes are named `name-...`. Returns those rules and the JSON base rules
// once, and no `root` rule. Errors as json_schema_to_gbnf's, the path from the pointer.
struct JsonValueRule {
  std::string name, schema_json, pointer;
};
std::string json_value_rules(const std::vector<JsonValueRule>& rules,
                             JsonWhitespace ws = JsonWhitespace::kFlexible);
// Any JSON object (response_format json_object).
Grammar json_object_grammar(JsonWhitespace ws = JsonWhitespace::kFlexible);

}  // namespace strata::grammar
