// strata chat: a conversation with a model (the bundled one by default) on the terminal. Each
// line of stdin is one user turn; the reply streams as it is generated. The whole history goes
// through the model's chat template every turn, and the prefix cache serves what earlier turns
// computed. EOF or "/exit" ends; "/reset" starts over.
//   strata chat [--model DIR] [--system TEXT] [--enable-thinking] [sampling flags]
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/cli/command.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/engine/detokenizer.h"
#include "strata/engine/engine.h"
#include "strata/tokenizer/chat_template.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;

// Runs one request to its end, printing its text as it streams; returns the whole text.
std::string stream_reply(Engine& engine, const std::string& id, std::vector<int32_t> prompt,
                         const SamplingParams& params) {
  engine.add_request(id, std::move(prompt), params);
  std::string reply;
  while (engine.has_unfinished()) {
    for (const RequestOutput& o : engine.step()) {
      for (const CompletionOutput& c : o.outputs) {
        std::fputs(c.text.c_str(), stdout);
        reply += c.text;
      }
      std::fflush(stdout);
    }
  }
  std::fputs("\n", stdout);
  return reply;
}

int run(int argc, char** argv) {
  CLI::App app{"Chat with a model on the terminal (one line of stdin per turn)", "strata chat"};
  EngineOptions eo;
  SamplingOptions so;
  so.max_tokens = 256;
  std::string system;
  bool thinking = false;
  add_engine_options(app, eo);
  add_sampling_options(app, so, /*greedy_default=*/false);
  app.add_option("--system", system, "a system message to start the conversation with");
  app.add_flag("--enable-thinking", thinking, "let the template open a reasoning block (Qwen3.5)");
  CLI11_PARSE(app, argc, argv);
  const EngineConfig config = engine_config(eo);
  const Tokenizer tokenizer = Tokenizer::load(config.model);
  const ChatTemplateConfig templates = load_chat_template_config(config.model);
  const ChatTemplate chat_template = ChatTemplate::compile(templates.select(false));
  Engine engine(config);
  engine.set_detokenizer(std::make_shared<TokenizerDetokenizer>(tokenizer));
  const SamplingParams params = sampling_params(so);
  const bool interactive = isatty(STDIN_FILENO);

  Json messages = Json::array();
  auto restart = [&] {
    messages = Json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  };
  restart();
  std::string line;
  for (int turn = 0;; ++turn) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      restart();
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    Json inputs = templates.special_tokens.is_object() ? templates.special_tokens : Json::object();
    inputs["messages"] = messages;
    inputs["add_generation_prompt"] = true;
    inputs["enable_thinking"] = thinking;
    try {
      std::vector<int32_t> ids = tokenizer.encode(chat_template.render(inputs), false);
      const std::string reply = stream_reply(engine, cat("turn-", turn), std::move(ids), params);
      messages.push_back({{"role", "assistant"}, {"content", reply}});
    } catch (const Error& e) {
      // A turn the engine refuses (the history outgrew the context, ...) is dropped.
      std::fprintf(stderr, "strata chat: %s\n", e.what());
      messages.erase(messages.end() - 1);
    }
  }
  const EngineStats s = engine.stats();
  std::fprintf(stderr, "strata chat: %lld prompt tokens looked up, %lld served from the prefix cache\n",
               (long long)s.prefix_queries, (long long)s.prefix_hits);
  return 0;
}

const bool kRegistered = register_command({"chat", "chat with a model on the terminal", run});

}  // namespace
}  // namespace strata::cli
