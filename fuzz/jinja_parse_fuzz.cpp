// libFuzzer target: arbitrary bytes as a chat template, compiled and rendered with a small
// conversation. Every failure must be a strata::Error; limits keep each input fast and bounded.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "strata/core/error.h"
#include "strata/tokenizer/jinja.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Zürich? {{ x }}"},
      {"role": "assistant", "content": "", "reasoning_content": "need a tool",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                       "arguments": {"city": "Zürich", "days": [1, 2.5, null, true]}}}]},
      {"role": "tool", "content": "{\"temp\": 12}"},
      {"role": "user", "content": ["part", {"type": "text", "text": "two"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": true, "enable_thinking": false, "tools_empty": [],
    "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": 0.5, "none": null
  })");
  return ctx;
}

strata::jinja::Limits fuzz_limits() {
  strata::jinja::Limits l;
  l.max_string_bytes = 1 << 20;
  l.max_list_items = 1 << 16;
  l.max_steps = 200000;
  l.max_call_depth = 64;
  l.max_parse_depth = 100;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const strata::jinja::Limits limits = fuzz_limits();
  std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    strata::jinja::Template t = strata::jinja::Template::compile(source, limits);
    t.render(context());
  } catch (const strata::Error&) {
    // Bad templates and failing renders are expected; crashes and hangs are not.
  }
  return 0;
}
