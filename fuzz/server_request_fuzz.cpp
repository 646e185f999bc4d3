// libFuzzer target: arbitrary bytes as an API request body (parse_body and every parse_*_request,
// chat in both tool-call formats: only ApiError may escape) and as model output for the tool-call
// and reasoning parsers (nothing may escape; the text cut in two at a point taken from the data
// gives what one push gives).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strata/server/api_error.h"
#include "strata/server/protocol.h"
#include "strata/server/reasoning_parser.h"
#include "strata/server/tool_parser.h"

namespace {

using Json = nlohmann::ordered_json;
using strata::server::ApiError;

template <class F>
void attempt(F&& f) {
  try {
    f();
  } catch (const ApiError&) {
    // Rejected requests are expected; any other exception escapes and is a finding.
  }
}

void fuzz_protocol(const std::string& text) {
  static const strata::server::RequestLimits limits;
  Json body;
  try {
    body = strata::server::parse_body(text, limits);
  } catch (const ApiError&) {
    return;
  }
  attempt([&] { strata::server::parse_completion_request(body, limits); });
  attempt([&] { strata::server::parse_chat_request(body, limits); });
  attempt([&] { strata::server::parse_chat_request(body, limits, strata::server::ToolCallFormat::kQwen3CoderXml); });
  attempt([&] { strata::server::parse_tokenize_request(body, limits); });
  attempt([&] { strata::server::parse_detokenize_request(body, limits); });
  if (auto tools = body.find("tools"); tools != body.end()) {
    (void)strata::server::tool_param_types(*tools);
  }
}

struct ToolResult {
  std::string content;
  std::vector<std::string> calls;  // name + '\0' + arguments, per index
  bool operator==(const ToolResult&) const = default;
};

ToolResult tools(const std::vector<std::string_view>& chunks) {
  static const strata::server::ToolParamTypes types = {{"f",
                                                        {{"s", "string"},
                                                         {"i", "integer"},
                                                         {"n", "number"},
                                                         {"b", "boolean"},
                                                         {"o", "object"},
                                                         {"a", "array"},
                                                         {"x", "any"}}}};
  strata::server::ToolCallParser p(types);
  ToolResult r;
  auto add = [&](const strata::server::ToolCallParser::Delta& d) {
    r.content += d.content;
    for (const strata::server::ToolCallDelta& c : d.calls) {
      if (c.index == int(r.calls.size())) {
        if (c.id.size() != 29 || c.name.empty() || !c.arguments.empty()) __builtin_trap();
        r.calls.push_back(c.name + '\0');
      } else if (c.index + 1 != int(r.calls.size()) || !c.id.empty() || !c.name.empty()) {
        __builtin_trap();
      } else {
        r.calls.back() += c.arguments;
      }
    }
  };
  for (std::string_view chunk : chunks) add(p.push(chunk));
  add(p.finish());
  if (p.num_calls() != int(r.calls.size())) __builtin_trap();
  return r;
}

// The concatenated reasoning and content.
std::string reasoning(bool starts_in, const std::vector<std::string_view>& chunks) {
  strata::server::ReasoningParser p(starts_in);
  std::string r, c;
  for (std::string_view chunk : chunks) {
    const auto d = p.push(chunk);
    r += d.reasoning;
    c += d.content;
  }
  const auto d = p.finish();
  return r + d.reasoning + '\0' + c + d.content;
}

void fuzz_parsers(std::string_view text, size_t cut) {
  const std::vector<std::string_view> whole = {text},
                                      split = {text.substr(0, cut), text.substr(cut)};
  if (!(tools(whole) == tools(split))) __builtin_trap();
  for (bool starts_in : {false, true}) {
    if (reasoning(starts_in, whole) != reasoning(starts_in, split)) __builtin_trap();
  }
  const std::string value(text.substr(0, 4096));
  for (const char* type : {"string", "integer", "number", "boolean", "object", "array", "any"}) {
    (void)strata::server::convert_parameter(value, type);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz_protocol(text);
  uint32_t h = 2166136261u;  // FNV-1a: a cut point that moves with the data
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  fuzz_parsers(text, size ? h % (size + 1) : 0);
  return 0;
}
