// Forced tool calls in the Qwen3-Coder XML format (Qwen3.5's and Qwen3-Next's chat templates),
// as GBNF text for the grammar module:
//
//   <tool_call>
//   <function=NAME>
//   <parameter=P>
//   VALUE
//   </parameter>
//   </function>
//   </tool_call>
//
// The parameters follow the function's `parameters` schema: its `properties` in their order,
// the `required` ones always, the others optional; no other parameter. A VALUE is what
// ToolCallParser turns into the schema's JSON (tool_parser.h), by the parameter's type as vLLM
// reads it (xml_parameter_type):
//   - "string": the raw text (no quotes): any text without "<" before "/" or "p" (so no closing
//     tag or next parameter can start inside it), never "null" in any case (the parser reads
//     that as null); with minLength / maxLength, that many characters other than "<"; `enum` /
//     `const` strings are the literal values. `pattern` and `format` are refused.
//   - "boolean" (no other keyword): true or false, also as Python writes them (True, False),
//     which is how the Qwen3.5 template renders a boolean argument;
//   - any other type: the JSON text of the parameter's schema (json_schema.h, whitespace `ws`).
// A schema or a name the format cannot carry is a 400 naming tools[i].function.parameters (or
// .name) and the keyword.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "strata/grammar/json_schema.h"

namespace strata::server {

// The GBNF rules of one call of any of `tools` (an OpenAI tools array, validated by the
// protocol; only the function named `only` when it is not empty): rule `tool-call`, with the
// rules it uses and the JSON base rules, and no `root` rule.
std::string xml_tool_call_rules(const nlohmann::ordered_json& tools, const std::string& only,
                                grammar::JsonWhitespace ws);

}  // namespace strata::server
