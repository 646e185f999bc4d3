// Structured-output request fields (issue 21): OpenAI's response_format and vLLM's guided_json,
// guided_regex, guided_choice, guided_grammar and structured_outputs, compiled to a grammar
// (src/strata/grammar/). At most one may constrain a request; a schema, pattern or grammar the
// grammar module refuses is a 400 naming the field, with the module's message (which names the
// unsupported feature).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/grammar/grammar.h"
#include "strata/grammar/json_schema.h"
#include "strata/server/protocol.h"

namespace strata::server {

// Whitespace in the request's JSON grammars (response_format, guided_json, structured_outputs,
// forced tool calls): flexible (docs/GRAMMAR.md), none when `structured_outputs` has
// `disable_any_whitespace: true` (vLLM's switch; not a boolean: a 400 naming it).
grammar::JsonWhitespace json_whitespace(const nlohmann::ordered_json& body);

// The grammar the body asks for, or null when it asks for none (or response_format "text").
std::shared_ptr<const grammar::Grammar> parse_guided(const nlohmann::ordered_json& body);

// tool_choice "required" (name empty: any of the tools) or a named function: calls in the
// model's format. Hermes: `<tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>`, ARGS
// following the function's `parameters` schema (any object when absent); Qwen3-Coder XML:
// xml_tool_grammar.h. `parallel`: one or more calls, separated by "\n" as the Qwen3 / Hermes /
// Qwen3.5 templates write them; else exactly one. A schema the grammar refuses is a 400 naming
// tools[i].function.parameters.
std::shared_ptr<const grammar::Grammar> tool_call_grammar(
    const nlohmann::ordered_json& tools, const std::string& name, bool parallel,
    grammar::JsonWhitespace ws = grammar::JsonWhitespace::kFlexible,
    ToolCallFormat format = ToolCallFormat::kHermes);

// The grammar of exactly one of the strings (guided_choice).
grammar::Grammar choice_grammar(const std::vector<std::string>& choices);

}  // namespace strata::server
