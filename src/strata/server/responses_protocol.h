// POST /v1/responses (the OpenAI Responses API, the subset vLLM serves): the body parsed into
// the chat request it runs as (input and instructions as messages, the flat tools as chat
// tools), plus what the response object echoes back. Every problem is an ApiError (400) naming
// the field.
//
// Served: input (a string, or a list of messages with string or input_text/output_text content
// and the function_call / function_call_output items of an earlier turn), instructions,
// max_output_tokens, temperature, top_p, top_k, seed, stream, tools (flat {type: "function",
// name, description, parameters}), tool_choice, parallel_tool_calls (as on chat completions: it
// bounds a required tool_choice to one call), metadata, user, and chat_template_kwargs (as on
// chat completions, e.g. {"enable_thinking": true}).
// Refused with a 400: previous_response_id and conversation (nothing is stored), background,
// built-in tools (web_search, file_search, ...), images and files in input, text.format other
// than "text", truncation other than "disabled".
// Accepted and ignored, as vLLM without a response store: store (nothing is stored; the
// response says store: false), reasoning (the model's chat template decides whether it thinks),
// include, service_tier, prompt_cache_key.
#pragma once

#include <nlohmann/json.hpp>

#include "strata/server/protocol.h"

namespace strata::server {

struct ResponsesRequest {
  ChatRequest chat;  // messages, tools, sampling and max_tokens, stream
  std::optional<std::string> instructions;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // as given (flat form)
  nlohmann::ordered_json tool_choice = "auto";
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  nlohmann::ordered_json user;  // null when absent
};

ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, const RequestLimits& limits,
                                         ToolCallFormat tool_calls = ToolCallFormat::kHermes);

}  // namespace strata::server
