// One chat completion's generated text split into what the API returns: reasoning_content
// (before </think>), content, and tool_calls parsed from the content. Fed incrementally; the
// concatenated deltas are the same however the text was cut, so streaming and non-streaming
// responses agree.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strata/server/reasoning_parser.h"
#include "strata/server/tool_parser.h"

namespace strata::server {

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ChatOutputParser {
 public:
  // starts_in_reasoning: the prompt ends inside an open think block. tools: the request's
  // tools when tool calls are to be parsed, else null.
  ChatOutputParser(bool starts_in_reasoning, const nlohmann::ordered_json& tools);

  ChatDelta push(std::string_view text);
  ChatDelta finish();
  int num_calls() const { return tools_ ? tools_->num_calls() : 0; }

 private:
  ChatDelta route(ReasoningParser::Delta d, bool at_end);

  ReasoningParser reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
};

// The whole-response form: deltas accumulated into content, reasoning_content and complete
// OpenAI tool_calls ([{"id", "type": "function", "function": {"name", "arguments"}}]).
struct ChatMessage {
  std::string reasoning, content;
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();
  void add(const ChatDelta& d);
};

}  // namespace strata::server
