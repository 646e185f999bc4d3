// strata chat: a conversation with a model (the bundled one by default) on the terminal. Each
// line of stdin is one user turn; the reply streams as it is generated. The whole history goes
// through the model's chat template every turn, and the prefix cache serves what earlier turns
// computed.
//   strata chat [--model DIR] [--system TEXT] [--enable-thinking] [sampling flags]
// Commands: /help, /reset (forget the conversation), /exit (or EOF). Ctrl-C stops the reply
// being generated (what came so far stays in the history), not the program. A reply cut by
// --max-tokens or by the context is marked. When the history outgrows the context (with room
// for --max-tokens of reply), the oldest turns are dropped, and chat says so.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <csignal>
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

volatile std::sig_atomic_t g_interrupted = 0;

// SIGINT sets a flag and interrupts a blocking read (no SA_RESTART) instead of ending the program.
void catch_ctrl_c() {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_interrupted = 1; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

constexpr const char* kHelp =
    "commands: /help (this), /reset (forget the conversation), /exit (or Ctrl-D); "
    "Ctrl-C stops a reply";

struct Reply {
  std::string text, finish_reason;
  int64_t tokens = 0;
};

// Runs one request to its end, printing its text as it streams; Ctrl-C aborts it.
Reply stream_reply(Engine& engine, const std::string& id, std::vector<int32_t> prompt,
                   const SamplingParams& params) {
  g_interrupted = 0;
  engine.add_request(id, std::move(prompt), params);
  Reply reply;
  bool aborted = false;
  while (engine.has_unfinished()) {
    if (g_interrupted && !aborted) {
      engine.abort(id);
      aborted = true;
    }
    for (const RequestOutput& o : engine.step()) {
      for (const CompletionOutput& c : o.outputs) {
        std::fputs(c.text.c_str(), stdout);
        reply.text += c.text;
        reply.tokens += int64_t(c.token_ids.size());
        if (c.finished()) reply.finish_reason = c.finish_reason;
      }
      std::fflush(stdout);
    }
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  g_interrupted = 0;
  return reply;
}

// The conversation, rendered by the chat template.
class Conversation {
 public:
  Conversation(const std::string& model, std::string system, bool thinking)
      : tokenizer_(Tokenizer::load(model)),
        templates_(load_chat_template_config(model)),
        template_(ChatTemplate::compile(templates_.select(false))),
        system_(std::move(system)),
        thinking_(thinking) {
    reset();
  }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  void reset() {
    messages_ = Json::array();
    if (!system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  }
  void add(const char* role, const std::string& content) { messages_.push_back({{"role", role}, {"content", content}}); }
  void drop_last() { messages_.erase(messages_.end() - 1); }
  // Drops the oldest user turn and the replies after it; false when only the last turn is left.
  bool drop_oldest_turn() {
    const size_t first = system_.empty() ? 0 : 1;
    size_t end = first + 1;
    while (end < messages_.size() && messages_[end]["role"] != "user") ++end;
    if (end >= messages_.size()) return false;
    messages_.erase(messages_.begin() + long(first), messages_.begin() + long(end));
    return true;
  }
  std::vector<int32_t> prompt() const {
    Json inputs = templates_.special_tokens.is_object() ? templates_.special_tokens : Json::object();
    inputs["messages"] = messages_;
    inputs["add_generation_prompt"] = true;
    inputs["enable_thinking"] = thinking_;
    return tokenizer_.encode(template_.render(inputs), false);
  }

 private:
  Tokenizer tokenizer_;
  ChatTemplateConfig templates_;
  ChatTemplate template_;
  std::string system_;
  bool thinking_;
  Json messages_;
};

// The prompt of the conversation with its new user turn, the oldest turns dropped until
// --max-tokens of reply fit in the context. Throws when the new turn alone leaves no room.
std::vector<int32_t> fit_prompt(Conversation& conv, int max_tokens, int64_t context) {
  std::vector<int32_t> ids = conv.prompt();
  int dropped = 0;
  while (int64_t(ids.size()) + max_tokens > context && conv.drop_oldest_turn()) {
    ++dropped;
    ids = conv.prompt();
  }
  if (dropped) {
    std::fprintf(stderr, "strata chat: the conversation outgrew the context of %lld tokens; dropped the oldest %d "
                 "turn%s (/reset forgets all)\n", (long long)context, dropped, dropped > 1 ? "s" : "");
  }
  STRATA_CHECK(int64_t(ids.size()) < context, "this message takes ", ids.size(), " tokens with the system message and ",
               "the template; the context holds ", context, " (--max-model-len)");
  return ids;
}

int run(int argc, char** argv) {
  CLI::App app{"Chat with a model on the terminal (one line of stdin per turn; /help)", "strata chat"};
  EngineOptions eo;
  SamplingOptions so;
  so.max_tokens = 256;
  std::string system;
  bool thinking = false;
  add_engine_options(app, eo);
  add_sampling_options(app, so);
  app.add_option("--system", system, "a system message to start the conversation with");
  app.add_flag("--enable-thinking", thinking, "let the template open a reasoning block (Qwen3.5)");
  CLI11_PARSE(app, argc, argv);
  STRATA_CHECK(so.n == 1, "--n: chat has one reply per turn, got ", so.n);
  const EngineConfig config = engine_config(eo);
  Conversation conv(config.model, system, thinking);
  Engine engine(config);
  engine.set_detokenizer(std::make_shared<TokenizerDetokenizer>(conv.tokenizer()));
  const SamplingParams params = sampling_params(so);
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) std::fprintf(stderr, "strata chat: %s\n", kHelp);
  catch_ctrl_c();

  std::string line;
  for (int turn = 0;; ++turn) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line)) {
      if (!g_interrupted) break;  // EOF
      g_interrupted = 0;           // Ctrl-C at the prompt: a fresh line
      std::cin.clear();
      std::clearerr(stdin);
      std::fprintf(stderr, "\n(/exit or Ctrl-D quits)\n");
      continue;
    }
    if (line == "/exit") break;
    if (line == "/help") {
      std::fprintf(stderr, "%s\n", kHelp);
      continue;
    }
    if (line == "/reset") {
      conv.reset();
      std::fprintf(stderr, "strata chat: conversation reset\n");
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    conv.add("user", line);
    try {
      std::vector<int32_t> ids = fit_prompt(conv, params.max_tokens, engine.max_model_len());
      const int64_t prompt_len = int64_t(ids.size());
      const Reply reply = stream_reply(engine, cat("turn-", turn), std::move(ids), params);
      conv.add("assistant", reply.text);
      if (reply.finish_reason == "abort") {
        std::fprintf(stderr, "[reply stopped by Ctrl-C]\n");
      } else if (reply.finish_reason == "length" && prompt_len + reply.tokens >= engine.max_model_len()) {
        std::fprintf(stderr, "[reply cut: the conversation filled the context of %lld tokens; /reset starts over]\n",
                     (long long)engine.max_model_len());
      } else if (reply.finish_reason == "length") {
        std::fprintf(stderr, "[reply cut at --max-tokens %d]\n", params.max_tokens);
      }
    } catch (const Error& e) {
      // A turn the engine refuses is dropped from the history.
      std::fprintf(stderr, "strata chat: %s\n", e.what());
      conv.drop_last();
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
