// JSON schema -> grammar of the JSON texts that the schema accepts, object properties in the
// order of the schema's `properties`, then any additional ones (docs/GRAMMAR.md lists the
// supported keywords; every other keyword is refused).
#pragma once

#include <string>
#include <string_view>

#include "strata/grammar/grammar.h"

namespace strata::grammar {

// Where the JSON grammars allow whitespace.
enum class JsonWhitespace {
  // JSON whitespace (space, \t, \n, \r) after `{`, `[`, `,` and `:`, and before `}`, `]`, `:`
  // and `,`, as RFC 8259 allows it, at most kMaxJsonWhitespace bytes in a row; none before or
  // after the whole value, so the output ends with the value's last character. Pretty-printed
  // JSON (`{"a": 1}`, indented lines) is accepted. vLLM's default (xgrammar's any_whitespace).
  kFlexible,
  // Canonical: no whitespace at all (`{"a":1,"b":[1,2]}`, what JSON.stringify writes).
  kNone,
};

// The longest whitespace run of kFlexible: a newline and 31 spaces (an indentation of 4 at
// depth 7, of 2 at depth 15). The bound keeps a model from writing whitespace forever.
constexpr int kMaxJsonWhitespace = 32;

// The schema as GBNF text (root rule `root`). Throws strata::Error naming the keyword and the
// schema path (e.g. "json schema: /properties/a: unsupported keyword 'pattern'").
std::string json_schema_to_gbnf(std::string_view schema_json,
                                JsonWhitespace ws = JsonWhitespace::kFlexible);
Grammar from_json_schema(std::string_view schema_json, JsonWhitespace ws = JsonWhitespace::kFlexible);
// Any JSON object (response_format json_object).
Grammar json_object_grammar(JsonWhitespace ws = JsonWhitespace::kFlexible);

}  // namespace strata::grammar
