// Chat templates: renders a conversation into a prompt exactly like transformers'
// apply_chat_template(..., tokenize=False), and reads the template of a model folder.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/tokenizer/jinja.h"

namespace strata {

class ChatTemplate {
 public:
  // Throws strata::Error (with line and column) on malformed or unsupported syntax.
  static ChatTemplate compile(std::string source, const jinja::Limits& limits = {});

  // inputs is a JSON object whose members become template variables: "messages", "tools",
  // "add_generation_prompt", "enable_thinking", "bos_token", "eos_token" and any other
  // template kwargs. Like transformers, "tools" and "documents" default to None and
  // "add_generation_prompt" to false. The ordered_json overload keeps object key order (as
  // Python dicts do), which matters for tool schemas printed with |tojson.
  // Throws jinja::RaisedError (what() is the template's message) for raise_exception(), and
  // strata::Error naming the template line for any other failure.
  std::string render(const nlohmann::ordered_json& inputs) const;
  std::string render(const nlohmann::json& inputs) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
};

// The chat template(s) and special tokens of a model folder.
struct ChatTemplateConfig {
  // Named templates; a single template is stored as "default".
  std::map<std::string, std::string> templates;
  // bos_token, eos_token, unk_token, pad_token, sep_token, cls_token, mask_token (those that are
  // set) and additional_special_tokens, as strings.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();

  // transformers' choice: "tool_use" when tools are given and it exists, else "default".
  const std::string& select(bool has_tools) const;
};

// Reads DIR/chat_template.jinja when present, else tokenizer_config.json's "chat_template" (a
// string, or a list of {"name", "template"}); special tokens come from tokenizer_config.json
// (plain strings or AddedToken objects {"content": ...}).
ChatTemplateConfig load_chat_template_config(const std::string& model_dir);

}  // namespace strata
