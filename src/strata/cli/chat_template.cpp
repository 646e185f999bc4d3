// strata chat-template [--model DIR]: renders the JSON request on stdin with the model's chat
// template and prints the prompt exactly (no newline added).
#include "strata/tokenizer/chat_template.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/core/error.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app(
      "Render a conversation (JSON on stdin) with a model's chat template.\n"
      "Input: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true,\n"
      "        \"enable_thinking\": false, ...}; members of \"chat_template_kwargs\" are\n"
      "merged in as template variables.",
      "strata chat-template");
  std::string model_dir;
  app.add_option("--model", model_dir,
                 "model folder (chat_template.jinja / tokenizer_config.json; default: the bundled model)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::ordered_json request;
  try {
    request = nlohmann::ordered_json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    strata::fail("stdin: invalid JSON: ", e.what());
  }
  STRATA_CHECK(request.is_object(), "stdin: expected a JSON object");
  if (request.contains("chat_template_kwargs")) {
    nlohmann::ordered_json extra = request["chat_template_kwargs"];
    request.erase("chat_template_kwargs");
    STRATA_CHECK(extra.is_object() || extra.is_null(), "chat_template_kwargs must be an object");
    if (extra.is_object())
      for (const auto& [k, v] : extra.items()) request[k] = v;
  }

  strata::ChatTemplateConfig config = strata::load_chat_template_config(strata::cli::model_dir_or_default(model_dir));
  nlohmann::ordered_json inputs = config.special_tokens;  // request members override these
  for (const auto& [k, v] : request.items()) inputs[k] = v;
  bool has_tools = inputs.contains("tools") && !inputs["tools"].is_null();
  strata::ChatTemplate tmpl = strata::ChatTemplate::compile(config.select(has_tools));
  std::string prompt = tmpl.render(inputs);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

const bool kRegistered = strata::cli::register_command(
    {"chat-template", "render a conversation with a model's chat template", run});

}  // namespace
