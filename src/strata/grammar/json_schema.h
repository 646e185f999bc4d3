// JSON schema -> grammar of the JSON texts that the schema accepts, in canonical form: no
// whitespace, object properties in the order of the schema's `properties`, then any additional
// ones (docs/GRAMMAR.md lists the supported keywords; every other keyword is refused).
#pragma once

#include <string>
#include <string_view>

#include "strata/grammar/grammar.h"

namespace strata::grammar {

// The schema as GBNF text (root rule `root`). Throws strata::Error naming the keyword and the
// schema path (e.g. "json schema: /properties/a: unsupported keyword 'pattern'").
std::string json_schema_to_gbnf(std::string_view schema_json);
Grammar from_json_schema(std::string_view schema_json);
// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace strata::grammar
