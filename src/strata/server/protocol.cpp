#include "strata/server/protocol.h"


#include <algorithm>
#include <climits>
#include <cmath>
#include <string_view>

#include "strata/io/config.h"
#include "strata/server/guided.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

std::string type_name(const Json& v) { return json_type_name(v); }

namespace {

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw bad_request("'" + param + "' must be " + expected + ", got " + type_name(v), param);
}

// The error name of `key` inside the object at `path` ("" at the top level).
std::string at(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : path + "." + key;
}

// The value of `key`, or nullptr when it is absent or null (OpenAI treats null as unset).
const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool is_integral(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15;
}

int64_t as_int(const Json& v, const std::string& param, int64_t lo, int64_t hi) {
  if (!is_integral(v)) wrong_type(param, "an integer", v);
  int64_t x;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    x = u > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    x = int64_t(v.get<double>());
  }
  if (x < lo || x > hi) {
    throw bad_request("'" + param + "' must be in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "], got " + std::to_string(x),
                      param);
  }
  return x;
}

std::optional<int64_t> get_int(const Json& obj, const char* key, int64_t lo, int64_t hi,
                               const std::string& path = "") {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  return as_int(*v, at(path, key), lo, hi);
}

std::optional<double> get_number(const Json& obj, const char* key) {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) throw bad_request(std::string("'") + key + "' must be finite", key);
  return d;
}

std::optional<bool> get_bool(const Json& obj, const char* key, const std::string& path = "") {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(at(path, key), "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& obj, const char* key,
                                      const std::string& path = "") {
  const Json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(at(path, key), "a string", *v);
  return v->get<std::string>();
}

std::vector<int32_t> token_ids(const Json& v, const std::string& param) {
  if (!v.is_array()) wrong_type(param, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ids.push_back(int32_t(as_int(v[i], param + "[" + std::to_string(i) + "]", 0, INT32_MAX)));
  }
  return ids;
}

void parse_generation_fields(const Json& b, const RequestLimits& limits, GenerationFields* g) {
  if (auto m = get_string(b, "model")) g->model = *m;
  SamplingParams& s = g->sampling;
  if (auto n = get_int(b, "n", 1, limits.max_n)) s.n = int(*n);
  if (auto best_of = get_int(b, "best_of", 1, limits.max_n); best_of && *best_of != s.n) {
    throw bad_request("'best_of' other than n is not supported", "best_of");
  }
  // max_completion_tokens is the newer name; when both are given it wins, as in vLLM.
  // 0 only for /v1/completions with echo (the prompt alone); the routes' parsers check it.
  if (auto m = get_int(b, "max_tokens", 0, INT32_MAX)) g->max_tokens = int(*m);
  if (auto m = get_int(b, "max_completion_tokens", 0, INT32_MAX)) g->max_tokens = int(*m);
  if (auto m = get_int(b, "min_tokens", 0, INT32_MAX)) s.min_tokens = int(*m);
  if (auto t = get_number(b, "temperature")) s.temperature = *t;
  if (auto t = get_number(b, "top_p")) s.top_p = *t;
  if (auto t = get_int(b, "top_k", INT32_MIN, INT32_MAX)) s.top_k = int(*t);
  if (auto t = get_number(b, "min_p")) s.min_p = *t;
  if (auto t = get_number(b, "repetition_penalty")) s.repetition_penalty = *t;
  if (auto t = get_number(b, "presence_penalty")) s.presence_penalty = *t;
  if (auto t = get_number(b, "frequency_penalty")) s.frequency_penalty = *t;
  if (auto t = get_int(b, "seed", INT64_MIN, INT64_MAX)) s.seed = uint64_t(*t);
  if (auto t = get_bool(b, "ignore_eos")) s.ignore_eos = *t;
  if (auto t = get_bool(b, "include_stop_str_in_output")) s.include_stop_str_in_output = *t;
  if (const Json* stop = field(b, "stop")) {
    if (stop->is_string()) {
      s.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (int(stop->size()) > limits.max_stop) {
        throw bad_request("'stop' may hold at most " + std::to_string(limits.max_stop) +
                              " strings", "stop");
      }
      for (const Json& x : *stop) {
        if (!x.is_string()) wrong_type("stop", "a string or an array of strings", *stop);
        s.stop.push_back(x.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& x : s.stop) {
      if (x.empty()) throw bad_request("'stop' strings must not be empty", "stop");
    }
  }
  if (const Json* ids = field(b, "stop_token_ids")) {
    s.stop_token_ids = token_ids(*ids, "stop_token_ids");
    if (int(s.stop_token_ids.size()) > limits.max_stop) {
      throw bad_request("'stop_token_ids' may hold at most " + std::to_string(limits.max_stop) +
                            " ids", "stop_token_ids");
    }
  }
  if (const Json* bias = field(b, "logit_bias")) {
    if (!bias->is_object()) wrong_type("logit_bias", "an object of token id -> bias", *bias);
    if (int(bias->size()) > limits.max_logit_bias) {
      throw bad_request("'logit_bias' may hold at most " + std::to_string(limits.max_logit_bias) +
                            " entries", "logit_bias");
    }
    for (const auto& [key, value] : bias->items()) {
      if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(key) > INT32_MAX) {
        throw bad_request("'logit_bias' keys must be token ids, got '" + key + "'", "logit_bias");
      }
      if (!value.is_number() || !std::isfinite(value.get<double>())) {
        throw bad_request("'logit_bias' values must be numbers, got " + type_name(value) +
                              " for token " + key, "logit_bias");
      }
      s.logit_bias[int32_t(std::stoll(key))] = value.get<double>();
    }
  }
  if (auto st = get_bool(b, "stream")) g->stream = *st;
  if (const Json* so = field(b, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!g->stream) {
      throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    if (auto u = get_bool(*so, "include_usage", "stream_options")) g->include_usage = *u;
    if (auto u = get_bool(*so, "continuous_usage_stats", "stream_options")) {
      g->continuous_usage = *u;
    }
  }
  g->grammar = parse_guided(b);
  if (field(b, "chat_template")) {
    throw bad_request("a request-supplied 'chat_template' is not accepted; the model's is used",
                      "chat_template");
  }
}

// Content parts: only text; joined with "\n" into one string (vLLM's "string" content format).
Json normalize_content(const Json& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) wrong_type(param, "a string, an array of content parts or null", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(p, "a content part object", part);
    const std::string type = get_string(part, "type", p).value_or("");
    if (type != "text") {
      throw bad_request("'" + p + ".type': only text content parts are supported, got '" + type +
                            "'", p);
    }
    const Json* t = field(part, "text");
    if (!t || !t->is_string()) throw bad_request("'" + p + ".text' must be a string", p + ".text");
    if (i) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

Json normalize_tool_calls(const Json& calls, const std::string& param, int max_nesting) {
  if (!calls.is_array()) wrong_type(param, "an array", calls);
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const Json& c = calls[i];
    if (!c.is_object()) wrong_type(p, "an object", c);
    const Json* fn = field(c, "function");
    if (!fn || !fn->is_object()) throw bad_request("'" + p + ".function' must be an object", p);
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string()) {
      throw bad_request("'" + p + ".function.name' must be a string", p + ".function.name");
    }
    Json args = Json::object();
    if (const Json* a = field(*fn, "arguments")) {
      if (a->is_object()) {
        args = *a;
      } else if (a->is_string()) {
        // Templates iterate the arguments as a mapping, as vLLM passes them. The string's JSON
        // is held to the body's nesting limit too (the template's values recurse).
        const std::string& text = a->get<std::string>();
        if (json_depth(text) > max_nesting) {
          throw bad_request("'" + p + ".function.arguments' nests deeper than " +
                                std::to_string(max_nesting) + " levels",
                            p + ".function.arguments");
        }
        Json parsed = Json::parse(text, nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object()) {
          throw bad_request("'" + p + ".function.arguments' must be a JSON object (or a string "
                                "holding one)", p + ".function.arguments");
        }
        args = std::move(parsed);
      } else {
        wrong_type(p + ".function.arguments", "a string or an object", *a);
      }
    }
    Json call = {{"type", "function"},
                 {"function", {{"name", *name}, {"arguments", std::move(args)}}}};
    if (auto id = get_string(c, "id", p)) call["id"] = *id;
    out.push_back(std::move(call));
  }
  return out;
}

Json normalize_messages(const Json& messages, int max_nesting) {
  if (!messages.is_array()) wrong_type("messages", "an array", messages);
  if (messages.empty()) throw bad_request("'messages' must not be empty", "messages");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const Json& m = messages[i];
    if (!m.is_object()) wrong_type(p, "an object", m);
    const Json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad_request("'" + p + ".role' must be a string", p + ".role");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      throw bad_request("'" + p + ".role' must be system, user, assistant or tool, got '" + r + "'",
                        p + ".role");
    }
    Json msg = {{"role", r}};
    const auto content = m.find("content");
    msg["content"] = content == m.end() ? Json() : normalize_content(*content, p + ".content");
    if (auto name = get_string(m, "name", p)) msg["name"] = *name;
    if (r == "assistant") {
      if (const Json* calls = field(m, "tool_calls")) {
        msg["tool_calls"] = normalize_tool_calls(*calls, p + ".tool_calls", max_nesting);
      }
      if (auto rc = get_string(m, "reasoning_content", p)) msg["reasoning_content"] = *rc;
    }
    if (r == "tool") {
      if (auto id = get_string(m, "tool_call_id", p)) msg["tool_call_id"] = *id;
    }
    if (r != "assistant" && msg["content"].is_null()) {
      throw bad_request("'" + p + ".content' is required for role " + r, p + ".content");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

Json validate_tools(const Json& tools) {
  if (!tools.is_array()) wrong_type("tools", "an array", tools);
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) wrong_type(p, "an object", t);
    if (get_string(t, "type", p).value_or("function") != "function") {
      throw bad_request("'" + p + ".type' must be \"function\"", p + ".type");
    }
    const Json* fn = field(t, "function");
    if (!fn || !fn->is_object()) throw bad_request("'" + p + ".function' must be an object", p);
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty()) {
      throw bad_request("'" + p + ".function.name' must be a non-empty string",
                        p + ".function.name");
    }
    get_string(*fn, "description", p + ".function");
    if (const Json* params = field(*fn, "parameters"); params && !params->is_object()) {
      wrong_type(p + ".function.parameters", "a JSON schema object", *params);
    }
  }
  return tools;
}

}  // namespace

Json parse_body(const std::string& body, const RequestLimits& limits) {
  // nlohmann's parser is iterative, but printing and the template's values recurse: bound the
  // nesting before parsing.
  if (json_depth(body) > limits.max_nesting) {
    throw bad_request("the request body nests deeper than " + std::to_string(limits.max_nesting) +
                      " levels");
  }
  Json j;
  try {
    j = Json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw bad_request(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw bad_request("the request body must be a JSON object, got " + type_name(j));
  return j;
}

// The name the request gave max_tokens by (max_completion_tokens wins when both are given).
static std::string max_tokens_name(const Json& b) {
  return field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
}

static void require_tokens(const Json& b, const GenerationFields& g) {
  if (g.max_tokens == 0) {
    const std::string name = max_tokens_name(b);
    throw bad_request("'" + name + "' must be >= 1, got 0", name);
  }
}

CompletionRequest parse_completion_request(const Json& b, const RequestLimits& limits) {
  CompletionRequest r;
  parse_generation_fields(b, limits, &r.gen);
  const Json* prompt = field(b, "prompt");
  if (!prompt) throw bad_request("'prompt' is required", "prompt");
  if (prompt->is_string()) {
    r.prompts.push_back(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->empty()) throw bad_request("'prompt' must not be empty", "prompt");
    const Json& first = (*prompt)[0];
    if (first.is_number()) {
      r.prompts.push_back(token_ids(*prompt, "prompt"));
    } else {
      if (int(prompt->size()) > limits.max_prompts) {
        throw bad_request("'prompt' may hold at most " + std::to_string(limits.max_prompts) +
                              " prompts", "prompt");
      }
      for (size_t i = 0; i < prompt->size(); ++i) {
        const Json& p = (*prompt)[i];
        const std::string param = "prompt[" + std::to_string(i) + "]";
        if (p.is_string()) r.prompts.push_back(p.get<std::string>());
        else if (p.is_array()) r.prompts.push_back(token_ids(p, param));
        else wrong_type(param, "a string or an array of token ids", p);
      }
    }
  } else {
    wrong_type("prompt", "a string, an array of token ids, or an array of those", *prompt);
  }
  if (auto e = get_bool(b, "echo")) r.echo = *e;
  if (const Json* lp = field(b, "logprobs")) {
    if (lp->is_boolean()) wrong_type("logprobs", "an integer (top alternatives per token)", *lp);
    r.logprobs = int(as_int(*lp, "logprobs", 0, kMaxLogprobs));
  }
  if (auto suffix = get_string(b, "suffix"); suffix && !suffix->empty()) {
    throw bad_request("'suffix' is not supported", "suffix");
  }
  if (r.gen.max_tokens == 0 && !r.echo) {
    const std::string name = max_tokens_name(b);
    throw bad_request("'" + name + "' must be >= 1, or 0 with 'echo': true (the prompt alone)", name);
  }
  if (field(b, "prompt_logprobs")) {
    throw bad_request("'prompt_logprobs' is not supported; 'echo': true with 'logprobs' returns "
                      "the prompt's log-probabilities", "prompt_logprobs");
  }
  return r;
}

ChatRequest parse_chat_request(const Json& b, const RequestLimits& limits, ToolCallFormat tool_calls) {
  ChatRequest r;
  parse_generation_fields(b, limits, &r.gen);
  require_tokens(b, r.gen);
  const Json* messages = field(b, "messages");
  if (!messages) throw bad_request("'messages' is required", "messages");
  r.messages = normalize_messages(*messages, limits.max_nesting);
  if (const Json* tools = field(b, "tools")) r.tools = validate_tools(*tools);
  if (const Json* tc = field(b, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "none") r.tool_choice = ToolChoice::kNone;
      else if (s == "auto") r.tool_choice = ToolChoice::kAuto;
      else if (s == "required") r.tool_choice = ToolChoice::kRequired;
      else throw bad_request("'tool_choice' must be none, auto, required or a function", "tool_choice");
    } else if (tc->is_object()) {
      const Json* fn = field(*tc, "function");
      const Json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string()) {
        throw bad_request("'tool_choice.function.name' must be a string", "tool_choice");
      }
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = name->get<std::string>();
    } else {
      wrong_type("tool_choice", "a string or an object", *tc);
    }
    if (r.tool_choice != ToolChoice::kNone && r.tool_choice != ToolChoice::kAuto && !r.has_tools()) {
      throw bad_request("'tool_choice' requires 'tools'", "tool_choice");
    }
    if (r.tool_choice == ToolChoice::kNamed) {
      bool found = false;
      for (const Json& t : r.tools) found = found || t["function"]["name"] == r.tool_choice_name;
      if (!found) {
        throw bad_request("'tool_choice' names function '" + r.tool_choice_name +
                              "', which is not in 'tools'", "tool_choice");
      }
    }
  }
  if (auto p = get_bool(b, "parallel_tool_calls")) r.parallel_tool_calls = *p;
  if (r.tools.is_array() && r.tools.empty()) r.tools = Json();
  if (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) {
    if (r.gen.grammar) {
      throw bad_request("'tool_choice' \"required\" or a named function cannot be combined with "
                        "response_format or guided decoding", "tool_choice");
    }
    // "required": one call, or one or more with parallel_tool_calls; a named function: exactly
    // one call, as OpenAI documents a forced function.
    const bool named = r.tool_choice == ToolChoice::kNamed;
    r.gen.grammar = tool_call_grammar(r.tools, named ? r.tool_choice_name : "",
                                      !named && r.parallel_tool_calls, json_whitespace(b), tool_calls);
  }
  if (auto lp = get_bool(b, "logprobs")) r.logprobs = *lp;
  if (auto top = get_int(b, "top_logprobs", 0, kMaxLogprobs)) {
    if (!r.logprobs && *top > 0) {
      throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
    r.top_logprobs = int(*top);
  }
  if (const Json* kw = field(b, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
    for (const char* reserved : {"messages", "tools", "add_generation_prompt"}) {
      if (kw->contains(reserved)) {
        throw bad_request(std::string("'chat_template_kwargs' may not set '") + reserved + "'",
                          "chat_template_kwargs");
      }
    }
    r.template_kwargs = *kw;
  }
  if (auto a = get_bool(b, "add_generation_prompt")) r.add_generation_prompt = *a;
  if (auto c = get_bool(b, "continue_final_message")) r.continue_final_message = *c;
  if (r.continue_final_message && r.add_generation_prompt) {
    if (field(b, "add_generation_prompt")) {
      throw bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                        "continue_final_message");
    }
    r.add_generation_prompt = false;
  }
  if (r.continue_final_message && r.messages.back()["role"] != "assistant") {
    throw bad_request("'continue_final_message' needs an assistant message last",
                      "continue_final_message");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const Json& b, const RequestLimits& limits) {
  TokenizeRequest r;
  if (auto m = get_string(b, "model")) r.model = *m;
  if (auto s = get_bool(b, "return_token_strs")) r.return_token_strs = *s;
  if (field(b, "messages")) {
    r.chat = parse_chat_request(b, limits);
    r.add_special_tokens = get_bool(b, "add_special_tokens").value_or(false);
  } else {
    r.prompt = get_string(b, "prompt");
    if (!r.prompt) throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    r.add_special_tokens = get_bool(b, "add_special_tokens").value_or(true);
  }
  return r;
}

DetokenizeRequest parse_detokenize_request(const Json& b, const RequestLimits&) {
  DetokenizeRequest r;
  if (auto m = get_string(b, "model")) r.model = *m;
  const Json* t = field(b, "tokens");
  if (!t) throw bad_request("'tokens' is required", "tokens");
  r.tokens = token_ids(*t, "tokens");
  return r;
}

}  // namespace strata::server
