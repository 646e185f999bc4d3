#include "strata/server/responses_output.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

Json ResponseItems::at_item() const {
  return {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}};
}

std::vector<Json> ResponseItems::open(Kind kind, const ToolCallDelta* call) {
  const std::string id_tail = ids_ + "_" + std::to_string(output_.size());
  Json part;
  if (kind == Kind::kReasoning) {
    output_.push_back({{"id", "rs_" + id_tail}, {"type", "reasoning"}, {"summary", Json::array()},
                       {"content", Json::array()}});
    part = {{"type", "reasoning_text"}, {"text", ""}};
  } else if (kind == Kind::kMessage) {
    output_.push_back({{"id", "msg_" + id_tail}, {"type", "message"}, {"role", "assistant"},
                       {"status", "in_progress"}, {"content", Json::array()}});
    part = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
  } else {
    output_.push_back({{"id", "fc_" + id_tail}, {"type", "function_call"}, {"call_id", call->id},
                       {"name", call->name}, {"arguments", ""}, {"status", "in_progress"}});
    open_call_ = call->index;
  }
  open_ = kind;
  text_.clear();
  std::vector<Json> events = {{{"type", "response.output_item.added"}, {"output_index", output_.size() - 1},
                               {"item", item()}}};
  if (!part.is_null()) {
    Json e = {{"type", "response.content_part.added"}};
    const Json where = at_item();
    for (auto& [k, v] : where.items()) e[k] = v;
    e["content_index"] = 0;
    e["part"] = std::move(part);
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<Json> ResponseItems::close(const std::string& status) {
  std::vector<Json> events;
  if (open_ == Kind::kNone) return events;
  Json base = at_item();
  auto event = [&](const char* type) {
    Json e = {{"type", type}};
    for (auto& [k, v] : base.items()) e[k] = v;
    return e;
  };
  if (open_ == Kind::kCall) {
    Json e = event("response.function_call_arguments.done");
    e["arguments"] = item()["arguments"];
    e["name"] = item()["name"];
    events.push_back(std::move(e));
    item()["status"] = "completed";
  } else {
    const bool reasoning = open_ == Kind::kReasoning;
    Json part = reasoning ? Json{{"type", "reasoning_text"}, {"text", text_}}
                          : Json{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()},
                                 {"logprobs", Json::array()}};
    Json done = event(reasoning ? "response.reasoning_text.done" : "response.output_text.done");
    done["content_index"] = 0;
    done["text"] = text_;
    if (!reasoning) done["logprobs"] = Json::array();
    events.push_back(std::move(done));
    Json part_done = event("response.content_part.done");
    part_done["content_index"] = 0;
    part_done["part"] = part;
    events.push_back(std::move(part_done));
    item()["content"] = Json::array({part});
    if (!reasoning) item()["status"] = status;
  }
  events.push_back({{"type", "response.output_item.done"}, {"output_index", output_.size() - 1}, {"item", item()}});
  open_ = Kind::kNone;
  open_call_ = -1;
  return events;
}

std::vector<Json> ResponseItems::push(const ChatDelta& d) {
  std::vector<Json> events;
  auto append = [&](std::vector<Json> more) {
    for (Json& e : more) events.push_back(std::move(e));
  };
  auto text_delta = [&](Kind kind, const std::string& text) {
    if (text.empty()) return;
    if (open_ != kind) {
      append(close("completed"));
      append(open(kind, nullptr));
    }
    text_ += text;
    Json e = {{"type", kind == Kind::kReasoning ? "response.reasoning_text.delta" : "response.output_text.delta"}};
    const Json where = at_item();
    for (auto& [k, v] : where.items()) e[k] = v;
    e["content_index"] = 0;
    e["delta"] = text;
    if (kind == Kind::kMessage) e["logprobs"] = Json::array();
    events.push_back(std::move(e));
  };
  text_delta(Kind::kReasoning, d.reasoning);
  text_delta(Kind::kMessage, d.content);
  for (const ToolCallDelta& c : d.calls) {
    if (open_ != Kind::kCall || open_call_ != c.index) {
      append(close("completed"));
      append(open(Kind::kCall, &c));
    }
    if (c.arguments.empty()) continue;
    item()["arguments"] = item()["arguments"].get<std::string>() + c.arguments;
    Json e = {{"type", "response.function_call_arguments.delta"}};
    const Json where = at_item();
    for (auto& [k, v] : where.items()) e[k] = v;
    e["delta"] = c.arguments;
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<Json> ResponseItems::finish(const std::string& status) {
  std::vector<Json> events = close(status);
  bool answered = false;
  for (const Json& it : output_) answered = answered || it["type"] != "reasoning";
  if (!answered) {
    for (Json& e : open(Kind::kMessage, nullptr)) events.push_back(std::move(e));
    for (Json& e : close(status)) events.push_back(std::move(e));
  }
  return events;
}

}  // namespace strata::server
