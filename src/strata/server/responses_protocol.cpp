#include "strata/server/responses_protocol.h"

#include <string>

namespace strata::server {

using Json = nlohmann::ordered_json;

namespace {

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw bad_request("'" + param + "' must be " + expected + ", got " + type_name(v), param);
}

const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string string_field(const Json& obj, const char* key, const std::string& path) {
  const Json* v = field(obj, key);
  const std::string p = path + "." + key;
  if (!v) throw bad_request("'" + p + "' is required", p);
  if (!v->is_string()) wrong_type(p, "a string", *v);
  return v->get<std::string>();
}

// A message's content: a string, or parts of input_text / output_text joined.
std::string message_text(const Json& content, const std::string& p) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(p, "a string or an array of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string pj = p + "[" + std::to_string(j) + "]";
    const Json& part = content[j];
    if (!part.is_object()) wrong_type(pj, "an object", part);
    const std::string type = string_field(part, "type", pj);
    if (type != "input_text" && type != "output_text" && type != "text") {
      throw bad_request("'" + pj + ".type' " + type + " is not supported; use input_text", pj + ".type");
    }
    text += string_field(part, "text", pj);
  }
  return text;
}

// Responses input items -> chat messages (function calls of earlier turns join the assistant
// message before them, as the chat templates expect).
Json input_messages(const Json& input) {
  Json messages = Json::array();
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return messages;
  }
  if (!input.is_array()) wrong_type("input", "a string or an array of input items", input);
  if (input.empty()) throw bad_request("'input' must not be empty", "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string p = "input[" + std::to_string(i) + "]";
    const Json& item = input[i];
    if (!item.is_object()) wrong_type(p, "an object", item);
    const Json* t = field(item, "type");
    if (t && !t->is_string()) wrong_type(p + ".type", "a string", *t);
    const std::string type = t ? t->get<std::string>() : "message";
    if (type == "message") {
      const std::string role = string_field(item, "role", p);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
        throw bad_request("'" + p + ".role' must be user, system, developer or assistant, got '" + role + "'",
                          p + ".role");
      }
      const Json* content = field(item, "content");
      if (!content) throw bad_request("'" + p + ".content' is required", p + ".content");
      messages.push_back({{"role", role}, {"content", message_text(*content, p + ".content")}});
    } else if (type == "function_call") {
      Json call = {{"id", string_field(item, "call_id", p)},
                   {"type", "function"},
                   {"function", {{"name", string_field(item, "name", p)},
                                 {"arguments", string_field(item, "arguments", p)}}}};
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", nullptr}});
      }
      Json& last = messages.back();
      if (!last.contains("tool_calls")) last["tool_calls"] = Json::array();
      last["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const Json* out = field(item, "output");
      if (!out) throw bad_request("'" + p + ".output' is required", p + ".output");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", string_field(item, "call_id", p)},
                          {"content", message_text(*out, p + ".output")}});
    } else if (type == "reasoning") {
      continue;  // an earlier turn's reasoning: the templates drop it from the history
    } else {
      throw bad_request("'" + p + ".type' " + type +
                            " is not supported; use message, function_call or function_call_output",
                        p + ".type");
    }
  }
  return messages;
}

// Flat function tools -> chat tools.
Json chat_tools(const Json& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    const std::string type = string_field(t, "type", p);
    if (type != "function") {
      throw bad_request("'" + p + ".type' " + type + " is not supported: only function tools are", p + ".type");
    }
    Json fn = {{"name", string_field(t, "name", p)}};
    if (const Json* d = field(t, "description")) {
      if (!d->is_string()) wrong_type(p + ".description", "a string", *d);
      fn["description"] = *d;
    }
    if (const Json* params = field(t, "parameters")) {
      if (!params->is_object()) wrong_type(p + ".parameters", "a JSON schema object", *params);
      fn["parameters"] = *params;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

Json chat_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;  // none / auto / required: the chat parser checks
  if (!choice.is_object()) wrong_type("tool_choice", "a string or an object", choice);
  const Json* type = field(choice, "type");
  if (!type || *type != "function") {
    throw bad_request("'tool_choice.type' must be \"function\" (built-in tools are not supported)",
                      "tool_choice.type");
  }
  return {{"type", "function"}, {"function", {{"name", string_field(choice, "name", "tool_choice")}}}};
}

void refuse(const Json& b, const char* key, const char* why) {
  if (field(b, key)) throw bad_request(std::string("'") + key + "' is not supported: " + why, key);
}

}  // namespace

ResponsesRequest parse_responses_request(const Json& b, const RequestLimits& limits, ToolCallFormat tool_calls) {
  refuse(b, "previous_response_id", "this server stores no responses; send the whole conversation as input");
  refuse(b, "conversation", "this server stores no conversations; send the whole conversation as input");
  if (const Json* bg = field(b, "background"); bg && *bg != false) {
    throw bad_request("'background' is not supported: responses run in the request", "background");
  }
  if (const Json* tr = field(b, "truncation"); tr && *tr != "disabled") {
    throw bad_request("'truncation' must be \"disabled\"", "truncation");
  }
  if (const Json* text = field(b, "text")) {
    if (!text->is_object()) wrong_type("text", "an object", *text);
    if (const Json* format = field(*text, "format")) {
      const Json* type = format->is_object() ? field(*format, "type") : nullptr;
      if (!type || *type != "text") {
        throw bad_request("'text.format' must be {\"type\": \"text\"}: structured output is not supported",
                          "text.format");
      }
    }
  }
  ResponsesRequest r;
  Json chat = Json::object();
  for (const char* key : {"model", "temperature", "top_p", "top_k", "min_p", "seed", "stream",
                          "repetition_penalty", "presence_penalty", "frequency_penalty",
                          "chat_template_kwargs", "parallel_tool_calls"}) {
    if (const Json* v = field(b, key)) chat[key] = *v;
  }
  const Json* input = field(b, "input");
  if (!input) throw bad_request("'input' is required", "input");
  Json messages = input_messages(*input);
  if (const Json* ins = field(b, "instructions")) {
    if (!ins->is_string()) wrong_type("instructions", "a string", *ins);
    r.instructions = ins->get<std::string>();
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", *r.instructions}});
  }
  chat["messages"] = std::move(messages);
  if (const Json* m = field(b, "max_output_tokens")) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > INT32_MAX) {
      throw bad_request("'max_output_tokens' must be an integer >= 1, got " + m->dump(), "max_output_tokens");
    }
    chat["max_tokens"] = *m;
  }
  if (const Json* tools = field(b, "tools")) {
    chat["tools"] = chat_tools(*tools);
    r.tools = *tools;
  }
  if (const Json* tc = field(b, "tool_choice")) {
    chat["tool_choice"] = chat_tool_choice(*tc);
    r.tool_choice = *tc;
  }
  if (const Json* md = field(b, "metadata")) {
    if (!md->is_object()) wrong_type("metadata", "an object", *md);
    r.metadata = *md;
  }
  if (const Json* u = field(b, "user")) {
    if (!u->is_string()) wrong_type("user", "a string", *u);
    r.user = *u;
  }
  r.chat = parse_chat_request(chat, limits, tool_calls);
  return r;
}

}  // namespace strata::server
