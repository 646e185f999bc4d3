#include "strata/server/chat_output.h"

namespace strata::server {

ChatOutputParser::ChatOutputParser(bool starts_in_reasoning, const nlohmann::ordered_json& tools)
    : reasoning_(starts_in_reasoning) {
  if (tools.is_array() && !tools.empty()) {
    tools_ = std::make_unique<ToolCallParser>(tool_param_types(tools));
  }
}

ChatDelta ChatOutputParser::route(ReasoningParser::Delta d, bool at_end) {
  ChatDelta out;
  out.reasoning = std::move(d.reasoning);
  if (!tools_) {
    out.content = std::move(d.content);
    return out;
  }
  ToolCallParser::Delta t = d.content.empty() ? ToolCallParser::Delta{} : tools_->push(d.content);
  if (at_end) {
    ToolCallParser::Delta rest = tools_->finish();
    t.content += rest.content;
    t.calls.insert(t.calls.end(), rest.calls.begin(), rest.calls.end());
  }
  out.content = std::move(t.content);
  out.calls = std::move(t.calls);
  return out;
}

ChatDelta ChatOutputParser::push(std::string_view text) { return route(reasoning_.push(text), false); }

ChatDelta ChatOutputParser::finish() { return route(reasoning_.finish(), true); }

void ChatMessage::add(const ChatDelta& d) {
  reasoning += d.reasoning;
  content += d.content;
  for (const ToolCallDelta& c : d.calls) {
    while (int(tool_calls.size()) <= c.index) {
      tool_calls.push_back({{"id", ""},
                            {"type", "function"},
                            {"function", {{"name", ""}, {"arguments", ""}}}});
    }
    nlohmann::ordered_json& call = tool_calls[size_t(c.index)];
    if (!c.id.empty()) call["id"] = c.id;
    if (!c.name.empty()) call["function"]["name"] = c.name;
    call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + c.arguments;
  }
}

}  // namespace strata::server
