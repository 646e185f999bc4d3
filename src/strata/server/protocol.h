// The request bodies of the OpenAI-compatible API, parsed and type-checked (no model needed):
// JSON text -> CompletionRequest / ChatRequest / TokenizeRequest / DetokenizeRequest. Every
// problem is an ApiError (400) naming the field; nothing else is thrown. The model-dependent
// checks (prompt length, vocabulary, the chat template) come later, in the route handlers.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "strata/engine/sampling_params.h"
#include "strata/grammar/grammar.h"
#include "strata/server/api_error.h"

namespace strata::server {

// Bounds on what one request may ask for, before any model-specific check.
struct RequestLimits {
  int max_n = 128;             // completions per prompt
  int max_prompts = 256;       // prompts in one completions request
  int max_stop = 64;           // stop strings / stop token ids
  int max_nesting = 64;        // JSON nesting depth of a body
  int max_logit_bias = 1024;   // entries in logit_bias
};

// Fields shared by /v1/completions and /v1/chat/completions.
struct GenerationFields {
  std::string model;                // "" when absent
  SamplingParams sampling;          // max_tokens left at its default; see max_tokens
  std::optional<int> max_tokens;    // max_tokens or max_completion_tokens, when given
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool continuous_usage = false;    // stream_options.continuous_usage_stats (vLLM)
  // Structured output: response_format, guided_* or structured_outputs (server/guided.h);
  // null when none. The routes pair it with the tokenizer's vocabulary.
  std::shared_ptr<const grammar::Grammar> grammar;
};

// A prompt is text or token ids.
using PromptInput = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  GenerationFields gen;
  std::vector<PromptInput> prompts;  // one or more
  bool echo = false;
  std::optional<int> logprobs;       // completions format: an int, top alternatives per token
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// How the model writes tool calls, which is how forced calls (tool_choice "required" or a named
// function) are constrained: Hermes JSON (Qwen2.5 / Qwen3 templates) or Qwen3-Coder XML
// (Qwen3.5 / Qwen3-Next templates; tool_parser.h shows both). The server takes it from the chat
// template (server_state.h).
enum class ToolCallFormat { kHermes, kQwen3CoderXml };

struct ChatRequest {
  GenerationFields gen;
  nlohmann::ordered_json messages;   // validated, normalized for the template (see protocol.cpp)
  nlohmann::ordered_json tools;      // array, or null when absent/empty
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;      // kNamed
  // Whether tool_choice "required" may make several calls (OpenAI's default); not enforced
  // under "auto".
  bool parallel_tool_calls = true;
  bool logprobs = false;
  int top_logprobs = 0;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool has_tools() const { return tools.is_array() && !tools.empty(); }
  // Tool parsing applies when tools are given and tool_choice is not "none".
  bool parse_tools() const { return has_tools() && tool_choice != ToolChoice::kNone; }
};

// POST /tokenize: a prompt, or chat messages (vLLM's two shapes).
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;  // when "messages" is given
  bool add_special_tokens = true;   // prompt form (the chat form defaults to false)
  bool return_token_strs = false;
};

// POST /detokenize.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Parses the body as a JSON object (400 on invalid JSON, deeper nesting than the limit, or a
// non-object).
nlohmann::ordered_json parse_body(const std::string& body, const RequestLimits& limits);

CompletionRequest parse_completion_request(const nlohmann::ordered_json& body,
                                           const RequestLimits& limits);
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestLimits& limits,
                               ToolCallFormat tool_calls = ToolCallFormat::kHermes);
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body,
                                       const RequestLimits& limits);
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body,
                                           const RequestLimits& limits);

// The JSON type of a value for error messages ("string", "integer", "array", ...).
std::string type_name(const nlohmann::ordered_json& v);

}  // namespace strata::server
