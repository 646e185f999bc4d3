#include "strata/server/server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <random>

#include "strata/core/error.h"
#include "strata/server/http_connections.h"
#include "strata/server/request_framing.h"
#include "strata/server/server_state.h"

namespace strata::server {

namespace {

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.body(), e.status()); }

}  // namespace

void send_json(httplib::Response& res, const Json& body, int status) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

std::shared_ptr<const StructuredOutput> ServerState::structured_output(std::shared_ptr<const grammar::Grammar> g) {
  if (!g) return nullptr;
  const std::string key = g->to_string();
  std::lock_guard<std::mutex> lock(grammar_mutex);
  if (auto it = grammars.find(key); it != grammars.end()) return it->second;
  if (!grammar_vocab) {
    grammar_vocab = std::make_shared<const grammar::TokenVocabulary>(
        grammar::TokenVocabulary::from_tokenizer(*tokenizer, eos_ids));
  }
  auto so = StructuredOutput::make(std::move(g), grammar_vocab);
  if (grammar_order.size() >= kCachedGrammars) {
    grammars.erase(grammar_order.front());
    grammar_order.pop_front();
  }
  grammars.emplace(key, so);
  grammar_order.push_back(key);
  return so;
}

std::string ServerState::new_id(const char* prefix) {
  static const uint64_t salt = std::random_device{}();
  const uint64_t n = next_id.fetch_add(1);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%08llx%08llx", prefix, (unsigned long long)(salt & 0xffffffff),
                (unsigned long long)n);
  return buf;
}

void ServerState::check_model(const std::string& requested) const {
  if (!requested.empty() && requested != model_name) {
    throw ApiError(404, cat("the model '", requested, "' does not exist; this server serves '",
                            model_name, "'"),
                   "model", "model_not_found");
  }
}

std::string ServerState::token_text(int32_t id) const {
  const int32_t one[1] = {id};
  return tokenizer->decode(one, false);
}

struct ApiServer::Impl {
  ServerState st;
  std::unique_ptr<HttpServer> http;
  int port = -1;
  // The periodic stats line.
  std::thread stats;
  std::mutex stats_mu;
  std::condition_variable stats_cv;
  bool stats_stop = false;

  void log_stats();
  void stop_stats();

  // The tokenizer, chat templates and names of the model folder.
  void load_text(ServerOptions options, const std::string& dir);
  void routes();
  // Runs a handler, answering ApiError (and Error from input checks) as OpenAI errors.
  template <class F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        st.metrics.on_rejected(e.status());
        send_error(res, e);
      } catch (const Error& e) {
        st.metrics.on_rejected(400);
        send_error(res, ApiError(400, e.what()));
      }
    };
  }
};

ApiServer::ApiServer(const EngineConfig& engine_config, ServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->load_text(std::move(options), engine_config.model);  // before the (slow) model load
  start(std::make_unique<Engine>(engine_config));
}

ApiServer::ApiServer(std::shared_ptr<Model> model, const EngineConfig& engine_config, ServerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->load_text(std::move(options), engine_config.model);
  start(std::make_unique<Engine>(std::move(model), engine_config,
                                 GenerationDefaults::load(engine_config.model)));
}

void ApiServer::Impl::load_text(ServerOptions options, const std::string& dir) {
  st.options = std::move(options);
  st.log = ServeLog(st.options.log_level, st.options.log_requests);
  st.model_dir = dir;
  st.model_name = st.options.served_model_name;
  if (st.model_name.empty()) {
    st.model_name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (st.model_name.empty()) st.model_name = std::filesystem::path(dir).parent_path().filename().string();
  }
  st.created = int64_t(std::time(nullptr));
  st.tokenizer.emplace(Tokenizer::load(dir));  // an Error naming DIR/tokenizer.json when missing
  // A chat template that does not load or compile leaves the completions routes serving;
  // chat requests are answered with the error.
  const std::string source = std::filesystem::exists(dir + "/chat_template.jinja")
                                 ? dir + "/chat_template.jinja"
                                 : dir + "/tokenizer_config.json";
  try {
    st.template_config = load_chat_template_config(dir);
    if (!st.template_config.templates.empty()) {
      // select() gives the template source: "tool_use" for requests with tools when the model
      // has one, else "default".
      const std::string& plain = st.template_config.select(false);
      const std::string& tools = st.template_config.select(true);
      st.chat_template.emplace(ChatTemplate::compile(plain));
      if (&tools != &plain) st.tool_template.emplace(ChatTemplate::compile(tools));
      st.tool_call_format = tools.find("<function=") != std::string::npos ? ToolCallFormat::kQwen3CoderXml
                                                                          : ToolCallFormat::kHermes;
    }
  } catch (const Error& e) {
    st.chat_template.reset();
    st.tool_template.reset();
    st.template_error = cat("the chat template of ", source, " does not compile (", e.what(),
                            "); chat requests cannot be served, /v1/completions can");
    st.log.write(LogLevel::kWarning, st.template_error);
  }
}

void ApiServer::start(std::unique_ptr<Engine> engine) {
  ServerState& st = impl_->st;
  engine->set_detokenizer(std::make_shared<TokenizerDetokenizer>(*st.tokenizer));
  st.eos_ids = engine->eos_ids();
  st.loop = std::make_unique<EngineLoop>(
      std::move(engine), [&st](const RequestOutput& last, int64_t generated,
                               const std::vector<std::string>& reasons) {
        st.metrics.on_finished(last, generated, reasons);
        st.log.request_finished(last, generated, reasons);
      });
  impl_->routes();
  if (st.options.stats_interval_s > 0) impl_->stats = std::thread([this] { impl_->log_stats(); });
}

void ApiServer::Impl::log_stats() {
  using Clock = std::chrono::steady_clock;
  EngineStats before = st.loop->snapshot().stats;
  Clock::time_point then = Clock::now();
  const auto interval = std::chrono::milliseconds(int64_t(st.options.stats_interval_s * 1000));
  std::unique_lock<std::mutex> lock(stats_mu);
  while (!stats_cv.wait_for(lock, interval, [this] { return stats_stop; })) {
    const EngineStats now = st.loop->snapshot().stats;
    const Clock::time_point at = Clock::now();
    bool active = false;
    const std::string line = stats_line(before, now, std::chrono::duration<double>(at - then).count(), &active);
    st.log.write(active ? LogLevel::kInfo : LogLevel::kDebug, line);
    before = now;
    then = at;
  }
}

void ApiServer::Impl::stop_stats() {
  {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats_stop = true;
  }
  stats_cv.notify_all();
  if (stats.joinable()) stats.join();
}

ApiServer::~ApiServer() {
  stop();
  impl_->stop_stats();
  impl_->st.loop.reset();
}

void ApiServer::Impl::routes() {
  const ServerOptions& o = st.options;
  ConnectionOptions co;
  co.request_threads = o.http_threads;
  co.read_timeout_s = o.read_timeout_s;
  co.write_timeout_s = o.write_timeout_s;
  co.keep_alive_timeout_s = o.keep_alive_timeout_s;
  http = std::make_unique<HttpServer>(co);
  http->set_payload_max_length(o.max_body_bytes);
  http->set_keep_alive_timeout(time_t(o.keep_alive_timeout_s));  // the Keep-Alive header
  http->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (std::optional<ApiError> framing = check_request_framing(req, st.options.max_body_bytes)) {
      // The unread body cannot be told from a next request: this connection ends here.
      close_connection_after_response();
      res.set_header("Connection", "close");
      st.metrics.on_rejected(framing->status());
      send_error(res, *framing);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (st.options.api_key.empty() || req.path.rfind("/v1", 0) != 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (req.get_header_value("Authorization") == "Bearer " + st.options.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    st.metrics.on_rejected(401);
    send_error(res, ApiError(401, "a valid API key is needed: 'Authorization: Bearer KEY'", "",
                             "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 malformed HTTP) get an
  // OpenAI-shaped body too.
  http->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = cat("HTTP ", res.status);
    if (res.status == 404) message = cat("no route ", req.method, " ", req.path);
    if (res.status == 413) message = body_too_large_message(st.options.max_body_bytes);
    if (res.status == 405) message = cat("method ", req.method, " is not allowed on ", req.path);
    if (res.status != 401) st.metrics.on_rejected(res.status);
    send_error(res, ApiError(res.status, message));
  });
  http->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    st.log.write(LogLevel::kError, cat("internal error: ", what));
    send_error(res, ApiError(500, cat("internal error: ", what)));
  });

  http->Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
    handle_completions(st, q, r);
  }));
  http->Post("/v1/chat/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
    handle_chat(st, q, r);
  }));
  http->Post("/v1/responses", guarded([this](const httplib::Request& q, httplib::Response& r) {
    handle_responses(st, q, r);
  }));
  http->Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& r) {
    Json model = {{"id", st.model_name},       {"object", "model"},
                  {"created", st.created},     {"owned_by", "strata"},
                  {"root", st.model_dir},      {"parent", nullptr},
                  {"max_model_len", st.loop->max_model_len()}};
    send_json(r, {{"object", "list"}, {"data", Json::array({model})}});
  }));
  http->Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    const LoopSnapshot s = st.loop->snapshot();
    if (s.alive) {
      r.status = 200;
    } else {
      send_error(r, ApiError(503, cat("the engine stopped after an error: ", s.last_error)));
    }
  });
  http->Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(st.metrics.render(st.loop->snapshot(), st.model_name), "text/plain; version=0.0.4");
  });
  http->Post("/tokenize", guarded([this](const httplib::Request& q, httplib::Response& r) {
    const TokenizeRequest t = parse_tokenize_request(parse_body(q.body, st.options.limits), st.options.limits);
    st.check_model(t.model);
    std::vector<int32_t> ids;
    if (t.chat) {
      ids = st.tokenizer->encode(render_chat(st, *t.chat), t.add_special_tokens);
    } else {
      ids = st.tokenizer->encode(*t.prompt, t.add_special_tokens);
    }
    Json out = {{"count", ids.size()}, {"max_model_len", st.loop->max_model_len()}, {"tokens", ids}};
    if (t.return_token_strs) {
      Json strs = Json::array();
      for (int32_t id : ids) strs.push_back(st.tokenizer->id_to_token(id).value_or(""));
      out["token_strs"] = std::move(strs);
    }
    send_json(r, out);
  }));
  http->Post("/detokenize", guarded([this](const httplib::Request& q, httplib::Response& r) {
    const DetokenizeRequest d = parse_detokenize_request(parse_body(q.body, st.options.limits), st.options.limits);
    st.check_model(d.model);
    const int64_t vocab = st.loop->model_info().vocab_size;
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      if (d.tokens[i] >= vocab) {
        throw ApiError(400, cat("'tokens[", i, "]' = ", d.tokens[i], " is outside the vocabulary (", vocab, ")"),
                       cat("tokens[", i, "]"));
      }
    }
    send_json(r, {{"prompt", st.tokenizer->decode(d.tokens)}});
  }));
}

int ApiServer::bind() {
  Impl& m = *impl_;
  m.port = m.http->bind(m.st.options.host, m.st.options.port);
  return m.port;
}

int ApiServer::port() const { return impl_->port; }

void ApiServer::serve() {
  if (impl_->port < 0) bind();
  impl_->http->serve();
}

void ApiServer::stop() {
  impl_->http->stop_accepting();
  impl_->st.loop->abort_all();
  impl_->http->close_all();
}

bool ApiServer::shutdown(double timeout_s) {
  Impl& m = *impl_;
  m.http->stop_accepting();
  const auto now = std::chrono::steady_clock::now();
  const bool drained = m.http->wait_idle(now + std::chrono::milliseconds(int64_t(timeout_s * 1000)));
  if (!drained) {
    m.st.log.write(LogLevel::kWarning, cat(m.st.loop->in_flight(), " requests still running after ",
                                           timeout_s, " s: aborting them"));
    m.st.loop->abort_all();
    m.http->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  }
  m.http->close_all();
  return drained;
}

const std::string& ApiServer::model_name() const { return impl_->st.model_name; }

}  // namespace strata::server
