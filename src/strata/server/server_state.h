// What the route handlers share (internal to src/strata/server/).
#pragma once

#include <httplib.h>

#include <atomic>
#include <deque>
#include <unordered_map>
#include <mutex>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strata/engine/structured_output.h"
#include "strata/server/engine_loop.h"
#include "strata/server/metrics.h"
#include "strata/server/protocol.h"
#include "strata/server/serve_log.h"
#include "strata/server/server.h"
#include "strata/tokenizer/chat_template.h"
#include "strata/tokenizer/tokenizer.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

struct ServerState {
  ServerOptions options;
  std::string model_dir, model_name;
  int64_t created = 0;  // unix seconds at start-up
  std::optional<Tokenizer> tokenizer;
  ChatTemplateConfig template_config;
  std::optional<ChatTemplate> chat_template, tool_template;  // tool_use when the model has one
  std::string template_error;  // why the chat template did not load ("" when it did)
  // Qwen3-Coder XML when the template for requests with tools writes `<function=`, else Hermes.
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;
  Metrics metrics;
  ServeLog log;
  std::unique_ptr<EngineLoop> loop;
  std::atomic<uint64_t> next_id{0};
  std::vector<int32_t> eos_ids;  // the engine's, the end ids of structured outputs

  // The constraint of a request's grammar over the tokenizer's vocabulary (built on first use);
  // null for a null grammar. The last kCachedGrammars constraints are kept by the grammar's
  // text, so requests with the same schema share one mask cache (filled masks included).
  std::shared_ptr<const StructuredOutput> structured_output(std::shared_ptr<const grammar::Grammar> g);
  static constexpr size_t kCachedGrammars = 64;
  std::mutex grammar_mutex;
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab;
  std::unordered_map<std::string, std::shared_ptr<const StructuredOutput>> grammars;
  std::deque<std::string> grammar_order;  // oldest first

  // "PREFIX-" + a process-unique hex id.
  std::string new_id(const char* prefix);
  // 404 unless `requested` is empty or the served model's name.
  void check_model(const std::string& requested) const;
  // The text of one token as the API shows it (its decoded bytes, lossy).
  std::string token_text(int32_t id) const;
};

// A request submitted to the engine: its id and its stream of deltas.
struct Submitted {
  std::string id;
  std::shared_ptr<RequestStream> stream;
  size_t prompt_tokens = 0;
};

// Fills max_tokens (default: the rest of the context, as vLLM), checks every prompt before
// any is queued, then queues them; an input the engine refuses is a 400 naming the field
// (`prompt_param` when the prompt is too long).
std::vector<Submitted> submit_all(ServerState& st, const std::string& base_id,
                                  const std::vector<std::vector<int32_t>>& prompts,
                                  SamplingParams params, std::optional<int> max_tokens,
                                  const char* prompt_param);
// Waits for the whole output of every request; when the client goes away (as vLLM, which
// aborts a request whose connection closes), aborts them all and throws.
std::vector<RequestOutput> collect(ServerState& st, const std::vector<Submitted>& subs);

// Sends `body` as JSON with `status`.
void send_json(httplib::Response& res, const Json& body, int status = 200);

// The prompt of a chat request: the model's chat template over its messages, tools and
// chat_template_kwargs (400 when the template refuses the conversation).
std::string render_chat(const ServerState& st, const ChatRequest& r);

// Routes of openai_routes.cpp.
void handle_completions(ServerState& st, const httplib::Request& req, httplib::Response& res);
void handle_chat(ServerState& st, const httplib::Request& req, httplib::Response& res);
// Route of responses_routes.cpp.
void handle_responses(ServerState& st, const httplib::Request& req, httplib::Response& res);

}  // namespace strata::server
