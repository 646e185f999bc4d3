// Tool calls in generated text, parsed incrementally into OpenAI tool_calls, for two formats:
//
//   Qwen3-Coder XML (Qwen3.5's templates):
//     <tool_call>
//     <function=get_weather>
//     <parameter=city>
//     Paris
//     </parameter>
//     </function>
//     </tool_call>
//   Hermes JSON (Qwen2.5 / Qwen3 templates):
//     <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
//
// The format is told apart per call by what follows <tool_call>. XML parameter values are typed
// by the tool's JSON schema (integer, number, boolean, object/array, else string), as vLLM's
// qwen3_coder parser does. Deltas follow vLLM's streaming shape: a call's first delta carries
// its id ("call_...") and name with empty arguments, later ones carry argument fragments; the
// fragments of a call concatenate to its JSON arguments, written as Python's json.dumps writes
// them ({"a": 1, "b": [1, 2]}). An XML call sends "{" once its name is read, then each
// parameter when it is complete; a Hermes call comes whole at its </tool_call>, once it is known
// to parse. Within one push, a call's fragments after its first delta are merged into one
// ToolCallDelta. Text outside calls is content (text that could be the start of "<tool_call>" is
// held back); whitespace after a call is dropped; a block that parses as neither format is given
// back as content, tags included.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace strata::server {

// function name -> parameter name -> JSON schema type ("string", "integer", ...).
using ToolParamTypes = std::map<std::string, std::map<std::string, std::string>>;
// Reads the types from an OpenAI tools array (malformed entries are skipped).
ToolParamTypes tool_param_types(const nlohmann::ordered_json& tools);

// The "type" of a property schema as vLLM reads it, by which an XML parameter's text converts:
// "string" without a type, a list of types gives its first non-null one (vLLM would stringify
// the list).
std::string xml_parameter_type(const nlohmann::ordered_json& schema);

// An XML parameter's text as a JSON value of the schema type (vLLM's conversion rules: "null"
// is null for any type, booleans other than "true" are false, object/array try JSON and then a
// Python literal; a value that does not convert stays a string).
nlohmann::ordered_json convert_parameter(const std::string& value, const std::string& type);

// A fresh "call_" + 24 random alphanumerics.
std::string make_tool_call_id();

struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // on the first delta of a call only
  std::string arguments;  // a fragment
};

class ToolCallParser {
 public:
  struct Delta {
    std::string content;
    std::vector<ToolCallDelta> calls;
    bool empty() const { return content.empty() && calls.empty(); }
  };

  explicit ToolCallParser(ToolParamTypes types = {});

  Delta push(std::string_view text);
  // The end of the output: completes an unterminated call from what it has (a parameter cut
  // off is kept as far as it got) and releases held-back text.
  Delta finish();
  int num_calls() const { return num_calls_; }

 private:
  enum class Mode { kText, kStart, kXmlName, kXmlBody, kXmlParam, kXmlValue, kXmlEnd, kHermes };
  // One step of the state machine over buf_: true when it made progress (run again), false when
  // it needs more text (or, at_end, is done).
  bool step(Delta* d, bool at_end);
  bool step_text(Delta* d, bool at_end);
  bool step_start(Delta* d, bool at_end);
  bool step_xml_name(Delta* d, bool at_end);
  bool step_xml_body(Delta* d, bool at_end);
  bool step_xml_param(bool at_end);
  bool step_xml_value(Delta* d, bool at_end);
  bool step_xml_end(bool at_end);
  bool step_hermes(Delta* d, bool at_end);
  void begin_call(Delta* d, const std::string& name);
  void args_out(Delta* d, const std::string& fragment);
  void xml_parameter(Delta* d, std::string value);
  void close_xml_call(Delta* d);
  void give_back(Delta* d);  // the block so far (raw_) back as content

  ToolParamTypes types_;
  Mode mode_ = Mode::kText;
  std::string buf_;          // text not yet consumed
  std::string raw_;          // the current block as consumed, for giving it back as content
  size_t scan_ = 0;          // no tag starts in buf_ before this (kXmlValue, kHermes)
  bool after_call_ = false;  // drop whitespace after a call
  int num_calls_ = 0;
  // The current XML call.
  std::string name_, param_;
  int params_ = 0;
};

}  // namespace strata::server
