// POST /v1/completions and POST /v1/chat/completions: request -> engine requests -> OpenAI
// responses, whole or streamed as server-sent events.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <ctime>

#include "strata/core/error.h"
#include "strata/core/field_error.h"
#include "strata/engine/llm.h"
#include "strata/server/chat_output.h"
#include "strata/server/http_connections.h"
#include "strata/server/server_state.h"
#include "strata/tokenizer/jinja_value.h"

namespace strata::server {

// ---- engine submission ----

std::vector<Submitted> submit_all(ServerState& st, const std::string& base_id,
                                  const std::vector<std::vector<int32_t>>& prompts,
                                  SamplingParams params, std::optional<int> max_tokens,
                                  const char* prompt_param) {
  std::vector<SamplingParams> per_prompt;
  const int64_t context = st.loop->max_model_len();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = params;
    const int64_t room = context - int64_t(prompts[i].size());
    const std::string prefix = prompts.size() > 1 ? cat("prompt ", i, ": ") : std::string();
    if (max_tokens) {
      p.max_tokens = *max_tokens;
    } else {
      p.max_tokens = int(std::clamp<int64_t>(room, 1, INT32_MAX));
    }
    if (room <= 0 || p.max_tokens > room) {
      throw ApiError(400, cat(prefix, "this model's maximum context length is ", context,
                              " tokens; the prompt has ", prompts[i].size(), " tokens and ",
                              p.max_tokens, " more were asked for"),
                     room > 0 ? "max_tokens" : prompt_param);
    }
    try {
      st.loop->validate(prompts[i], p);
    } catch (const FieldError& e) {
      throw ApiError(400, prefix + e.what(), e.field());
    } catch (const Error& e) {
      throw ApiError(400, prefix + e.what());
    }
    per_prompt.push_back(std::move(p));
  }
  if (!st.loop->snapshot().alive) throw ApiError(503, "the engine stopped after an error");
  std::vector<Submitted> subs;
  try {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string id = cat(base_id, "-", i);
      subs.push_back({id, st.loop->submit(id, prompts[i], per_prompt[i]), prompts[i].size()});
    }
  } catch (const Error& e) {
    for (const Submitted& s : subs) st.loop->abort(s.id);
    throw ApiError(400, e.what());
  }
  return subs;
}

// Waits for the whole output of every request; when the client goes away (as vLLM, which
// aborts a request whose connection closes), aborts them all and throws.
std::vector<RequestOutput> collect(ServerState& st, const std::vector<Submitted>& subs) {
  using Clock = std::chrono::steady_clock;
  std::vector<RequestOutput> wholes(subs.size());
  Clock::time_point next_check = Clock::now();
  for (size_t i = 0; i < subs.size(); ++i) {
    RequestOutput delta;
    for (;;) {
      if (Clock::now() >= next_check) {
        next_check = Clock::now() + std::chrono::milliseconds(100);
        if (client_disconnected()) {
          for (const Submitted& s : subs) st.loop->abort(s.id);
          throw ApiError(499, "the client closed the connection; the request was aborted");
        }
      }
      const RequestStream::Status status = subs[i].stream->next(&delta, 0.1);
      if (status == RequestStream::kFinished) break;
      if (status == RequestStream::kTimeout) continue;
      accumulate_output(wholes[i], delta);
      if (delta.finished) break;
    }
    if (!subs[i].stream->error().empty()) throw ApiError(503, subs[i].stream->error());
    std::sort(wholes[i].outputs.begin(), wholes[i].outputs.end(),
              [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
  }
  return wholes;
}

namespace {

Json stop_reason_json(const CompletionOutput& c) {
  if (c.stop_reason.empty()) return nullptr;
  if (c.stop_reason.find_first_not_of("0123456789") == std::string::npos) return std::stoll(c.stop_reason);
  return c.stop_reason;
}

Json finish_json(const std::string& reason) { return reason.empty() ? Json() : Json(reason); }

struct Usage {
  int64_t prompt = 0, completion = 0, cached = 0;
  Json json() const {
    return {{"prompt_tokens", prompt},
            {"total_tokens", prompt + completion},
            {"completion_tokens", completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }
};

// ---- logprobs ----

// A masked token (min_tokens, a structured output) has log-probability -inf, which JSON cannot
// hold: it is reported as -9999.0, as vLLM does.
double json_logprob(float lp) { return std::isinf(lp) && lp < 0 ? -9999.0 : double(lp); }

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Chat form: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const ServerState& st, const CompletionOutput& c) {
  Json content = Json::array();
  for (size_t t = 0; t < c.logprobs.size() && t < c.token_ids.size(); ++t) {
    const std::string text = st.token_text(c.token_ids[t]);
    Json top = Json::array();
    if (t < c.top_logprobs.size()) {
      for (const TokenLogprob& a : c.top_logprobs[t]) {
        const std::string at = st.token_text(a.token_id);
        top.push_back({{"token", at}, {"logprob", json_logprob(a.logprob)}, {"bytes", bytes_of(at)}});
      }
    }
    content.push_back({{"token", text}, {"logprob", c.logprobs[t]}, {"bytes", bytes_of(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

// Completions form: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets count
// on from `offset` (the text already sent for this choice).
class CompletionLogprobs {
 public:
  CompletionLogprobs(const ServerState& st, size_t offset) : st_(st), offset_(offset) {}

  // echo: the prompt's tokens, as vLLM: the first has null logprob and top_logprobs, each later
  // one its logprob and a dict of the top alternatives plus itself.
  void add_prompt(const std::vector<int32_t>& prompt, const RequestOutput& o) {
    for (size_t t = 0; t < prompt.size(); ++t) {
      if (t == 0 || t > o.prompt_logprobs.size()) {
        add(prompt[t], nullptr, nullptr);
        continue;
      }
      Json top = Json::object();
      if (t - 1 < o.prompt_top_logprobs.size()) {
        for (const TokenLogprob& a : o.prompt_top_logprobs[t - 1]) top[st_.token_text(a.token_id)] = a.logprob;
      }
      top[st_.token_text(prompt[t])] = o.prompt_logprobs[t - 1];
      add(prompt[t], o.prompt_logprobs[t - 1], std::move(top));
    }
  }

  void add_completion(const CompletionOutput& c) {
    for (size_t t = 0; t < c.logprobs.size() && t < c.token_ids.size(); ++t) {
      Json top = Json::object();
      if (t < c.top_logprobs.size()) {
        for (const TokenLogprob& a : c.top_logprobs[t]) top[st_.token_text(a.token_id)] = json_logprob(a.logprob);
      }
      add(c.token_ids[t], c.logprobs[t], std::move(top));
    }
  }

  size_t offset() const { return offset_; }  // where the next token's text starts

  Json json() const {
    return {{"tokens", tokens_}, {"token_logprobs", lps_}, {"top_logprobs", tops_}, {"text_offset", offsets_}};
  }

 private:
  void add(int32_t id, Json logprob, Json top) {
    const std::string text = st_.token_text(id);
    tokens_.push_back(text);
    lps_.push_back(std::move(logprob));
    tops_.push_back(std::move(top));
    offsets_.push_back(offset_);
    offset_ += text.size();
  }

  const ServerState& st_;
  size_t offset_;
  Json tokens_ = Json::array(), lps_ = Json::array(), tops_ = Json::array(), offsets_ = Json::array();
};

Json completion_logprobs(const ServerState& st, const CompletionOutput& c, size_t offset) {
  CompletionLogprobs lp(st, offset);
  lp.add_completion(c);
  return lp.json();
}

// ---- streaming ----

Json chunk_base(const ServerState& st, const std::string& id, const char* object, int64_t created,
                bool with_usage) {
  Json c = {{"id", id}, {"object", object}, {"created", created}, {"model", st.model_name}};
  c["choices"] = Json::array();
  if (with_usage) c["usage"] = nullptr;
  return c;
}

// Turns engine deltas into the chunks of one streamed response, counting its usage.
class ChunkWriter {
 public:
  ChunkWriter(ServerState& st, std::string id, const char* object, bool include_usage)
      : st_(st), id_(std::move(id)), object_(object), created_(std::time(nullptr)),
        include_usage_(include_usage) {}
  virtual ~ChunkWriter() = default;
  virtual std::vector<Json> start() { return {}; }
  std::vector<Json> delta(size_t prompt, const RequestOutput& d) {
    for (const CompletionOutput& c : d.outputs) usage_.completion += int64_t(c.token_ids.size());
    if (d.finished) {
      usage_.prompt += d.metrics.num_prompt_tokens;
      usage_.cached += d.metrics.num_cached_tokens;
    }
    return chunks(prompt, d);
  }
  // The usage chunk, when stream_options.include_usage asked for it.
  std::vector<Json> end() {
    if (!include_usage_) return {};
    Json c = chunk_base(st_, id_, object_, created_, true);
    c["usage"] = usage_.json();
    return {c};
  }

 protected:
  virtual std::vector<Json> chunks(size_t prompt, const RequestOutput& d) = 0;
  // A chunk with one choice.
  Json choice(Json fields) const {
    Json c = chunk_base(st_, id_, object_, created_, include_usage_);
    c["choices"].push_back(std::move(fields));
    return c;
  }

  ServerState& st_;

 private:
  std::string id_;
  const char* object_;
  int64_t created_;
  bool include_usage_;
  Usage usage_;
};

struct StreamJob {
  ServerState* st = nullptr;
  std::vector<Submitted> subs;
  std::vector<bool> done;
  std::unique_ptr<ChunkWriter> writer;
  bool started = false;
};

bool send_chunks(httplib::DataSink& sink, const std::vector<Json>& chunks) {
  for (const Json& c : chunks) {
    const std::string line = "data: " + c.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
    if (!sink.write(line.data(), line.size())) return false;
  }
  return true;
}

// Waits for the next deltas of the unfinished requests and writes their chunks; false when
// the client is gone.
bool pump(StreamJob& job, httplib::DataSink& sink) {
  if (!job.started) {
    job.started = true;
    if (!send_chunks(sink, job.writer->start())) return false;
  }
  if (client_disconnected()) return false;  // the releaser aborts what is unfinished
  bool got = false;
  for (int pass = 0; pass < 2 && !got; ++pass) {
    for (size_t i = 0; i < job.subs.size(); ++i) {
      if (job.done[i]) continue;
      RequestOutput d;
      // First pass: take what is there; second: wait on the first unfinished request.
      const RequestStream::Status s = job.subs[i].stream->next(&d, pass == 0 ? 0.0 : 0.1);
      if (s == RequestStream::kTimeout) {
        if (pass == 1) break;
        continue;
      }
      got = true;
      if (s == RequestStream::kFinished) {
        job.done[i] = true;
        const std::string error = job.subs[i].stream->error();
        if (!error.empty()) {
          if (!send_chunks(sink, {ApiError(503, error).body()})) return false;
        }
        continue;
      }
      if (d.finished) job.done[i] = true;
      if (!send_chunks(sink, job.writer->delta(i, d))) return false;
      if (pass == 1) break;
    }
  }
  if (std::all_of(job.done.begin(), job.done.end(), [](bool b) { return b; })) {
    if (!send_chunks(sink, job.writer->end())) return false;
    static const char kDone[] = "data: [DONE]\n\n";
    if (!sink.write(kDone, sizeof kDone - 1)) return false;
    sink.done();
  }
  return true;
}

void stream_response(ServerState& st, httplib::Response& res, std::vector<Submitted> subs,
                     std::unique_ptr<ChunkWriter> writer) {
  auto job = std::make_shared<StreamJob>();
  job->st = &st;
  job->done.assign(subs.size(), false);
  job->subs = std::move(subs);
  job->writer = std::move(writer);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [job](size_t, httplib::DataSink& sink) { return pump(*job, sink); },
      [job](bool) {
        // Done or disconnected: whatever has not finished is aborted, freeing its pages.
        for (size_t i = 0; i < job->subs.size(); ++i) {
          if (!job->done[i]) job->st->loop->abort(job->subs[i].id);
        }
      });
}

// ---- /v1/completions ----

class CompletionChunks : public ChunkWriter {
 public:
  // `prompts`: the token ids, whose logprobs an echo with logprobs sends with the prompt text.
  CompletionChunks(ServerState& st, std::string id, const CompletionRequest& r,
                   std::vector<std::string> echoes, std::vector<std::vector<int32_t>> prompts, size_t n)
      : ChunkWriter(st, std::move(id), "text_completion", r.gen.include_usage),
        logprobs_(r.logprobs.has_value()), echo_only_(r.gen.max_tokens == 0),
        echo_logprobs_(r.echo && r.logprobs), echoes_(std::move(echoes)), prompts_(std::move(prompts)),
        n_(n), sent_(echoes_.size() * n, 0), echoed_(echoes_.size(), false) {}

  // The echoes, unless they wait for their prompt logprobs (the first output of each prompt).
  std::vector<Json> start() override {
    std::vector<Json> out;
    if (echo_logprobs_) return out;
    for (size_t p = 0; p < echoes_.size(); ++p) echo(p, nullptr, out);
    return out;
  }

 private:
  void echo(size_t p, const RequestOutput* with_logprobs, std::vector<Json>& out) {
    echoed_[p] = true;
    for (size_t j = 0; j < n_; ++j) {
      if (echoes_[p].empty() && !with_logprobs) continue;
      Json lp;
      // With logprobs, offsets count the tokens' texts (as the whole response does).
      size_t sent = echoes_[p].size();
      if (with_logprobs) {
        CompletionLogprobs b(st_, 0);
        b.add_prompt(prompts_[p], *with_logprobs);
        lp = b.json();
        sent = b.offset();
      }
      out.push_back(text_choice(p * n_ + j, echoes_[p], std::move(lp), ""));
      sent_[p * n_ + j] += sent;
    }
  }

  std::vector<Json> chunks(size_t prompt, const RequestOutput& d) override {
    std::vector<Json> out;
    if (echo_logprobs_ && !echoed_[prompt]) echo(prompt, &d, out);
    for (const CompletionOutput& c : d.outputs) {
      const size_t index = prompt * n_ + size_t(c.index);
      if (echo_only_) {  // max_tokens 0: the prompt alone, and the drawn token is dropped
        if (c.finished()) out.push_back(text_choice(index, "", nullptr, c.finish_reason == "abort" ? "abort" : "length"));
        continue;
      }
      if (c.text.empty() && !c.finished() && !(logprobs_ && !c.token_ids.empty())) continue;
      Json lp = logprobs_ ? completion_logprobs(st_, c, sent_[index]) : Json();
      sent_[index] += c.text.size();
      Json ch = text_choice(index, c.text, std::move(lp), c.finish_reason);
      ch["choices"][0]["stop_reason"] = stop_reason_json(c);
      out.push_back(std::move(ch));
    }
    return out;
  }

  Json text_choice(size_t index, const std::string& text, Json logprobs, const std::string& finish) const {
    return choice({{"index", index},
                   {"text", text},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish_json(finish)}});
  }

  bool logprobs_, echo_only_, echo_logprobs_;
  std::vector<std::string> echoes_;
  std::vector<std::vector<int32_t>> prompts_;
  size_t n_;
  std::vector<size_t> sent_;
  std::vector<bool> echoed_;
};

// ---- /v1/chat/completions ----

std::string chat_finish(const std::string& reason, int calls) {
  return reason == "stop" && calls > 0 ? "tool_calls" : reason;
}

Json tool_call_delta_json(const ToolCallDelta& c) {
  Json j = {{"index", c.index}};
  if (!c.id.empty()) {
    j["id"] = c.id;
    j["type"] = "function";
  }
  Json fn = Json::object();
  if (!c.name.empty()) fn["name"] = c.name;
  fn["arguments"] = c.arguments;
  j["function"] = std::move(fn);
  return j;
}

class ChatChunks : public ChunkWriter {
 public:
  ChatChunks(ServerState& st, std::string id, const ChatRequest& r, bool starts_in_reasoning)
      : ChunkWriter(st, std::move(id), "chat.completion.chunk", r.gen.include_usage),
        logprobs_(r.logprobs) {
    for (int j = 0; j < r.gen.sampling.n; ++j) {
      parsers_.emplace_back(starts_in_reasoning, r.parse_tools() ? r.tools : Json());
    }
  }

  std::vector<Json> start() override {
    std::vector<Json> out;
    for (size_t j = 0; j < parsers_.size(); ++j) {
      out.push_back(delta_choice(j, {{"role", "assistant"}, {"content", ""}}, nullptr, ""));
    }
    return out;
  }

 private:
  std::vector<Json> chunks(size_t, const RequestOutput& d) override {
    std::vector<Json> out;
    for (const CompletionOutput& c : d.outputs) {
      ChatOutputParser& parser = parsers_[size_t(c.index)];
      ChatDelta cd = parser.push(c.text);
      if (c.finished()) {
        ChatDelta rest = parser.finish();
        cd.reasoning += rest.reasoning;
        cd.content += rest.content;
        cd.calls.insert(cd.calls.end(), rest.calls.begin(), rest.calls.end());
      }
      Json lp = logprobs_ && !c.token_ids.empty() ? chat_logprobs(st_, c) : Json();
      if (!cd.empty() || !lp.is_null()) {
        Json delta = Json::object();
        if (!cd.reasoning.empty()) delta["reasoning_content"] = cd.reasoning;
        if (!cd.content.empty()) delta["content"] = cd.content;
        if (!cd.calls.empty()) {
          delta["tool_calls"] = Json::array();
          for (const ToolCallDelta& t : cd.calls) delta["tool_calls"].push_back(tool_call_delta_json(t));
        }
        out.push_back(delta_choice(size_t(c.index), std::move(delta), std::move(lp), ""));
      }
      if (c.finished()) {
        Json last = delta_choice(size_t(c.index), Json::object(), nullptr,
                                 chat_finish(c.finish_reason, parser.num_calls()));
        last["choices"][0]["stop_reason"] = stop_reason_json(c);
        out.push_back(std::move(last));
      }
    }
    return out;
  }

  Json delta_choice(size_t index, Json delta, Json logprobs, const std::string& finish) const {
    return choice({{"index", index},
                   {"delta", std::move(delta)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish_json(finish)}});
  }

  bool logprobs_;
  std::vector<ChatOutputParser> parsers_;
};

SamplingParams chat_sampling(const ChatRequest& r) {
  SamplingParams p = r.gen.sampling;
  if (r.logprobs) p.logprobs = r.top_logprobs;
  return p;
}

}  // namespace

std::string render_chat(const ServerState& st, const ChatRequest& r) {
  const ChatTemplate* t = nullptr;
  if (r.has_tools() && st.tool_template) t = &*st.tool_template;
  else if (st.chat_template) t = &*st.chat_template;
  if (!st.template_error.empty()) throw ApiError(400, st.template_error, "messages", "chat_template_error");
  if (!t) throw ApiError(400, "this model has no chat template; use /v1/completions", "messages");
  Json inputs = st.template_config.special_tokens.is_object() ? st.template_config.special_tokens
                                                              : Json::object();
  for (const auto& [k, v] : r.template_kwargs.items()) inputs[k] = v;
  inputs["messages"] = r.messages;
  if (r.has_tools()) inputs["tools"] = r.tools;
  inputs["add_generation_prompt"] = r.add_generation_prompt;
  std::string prompt;
  try {
    prompt = t->render(inputs);
  } catch (const jinja::RaisedError& e) {
    throw ApiError(400, cat("the chat template refused the conversation: ", e.what()), "messages");
  } catch (const Error& e) {
    throw ApiError(400, cat("the chat template failed on this conversation: ", e.what()), "messages");
  }
  if (r.continue_final_message) {
    // The last message stays open: cut what the template put after its content.
    const Json& last = r.messages.back()["content"];
    const std::string text = last.is_string() ? last.get<std::string>() : std::string();
    const size_t at = text.empty() ? std::string::npos : prompt.rfind(text);
    if (at != std::string::npos) prompt.resize(at + text.size());
  }
  return prompt;
}

void handle_completions(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  const CompletionRequest r = parse_completion_request(parse_body(req.body, st.options.limits),
                                                       st.options.limits);
  st.check_model(r.gen.model);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echoes;
  for (const PromptInput& p : r.prompts) {
    if (const auto* text = std::get_if<std::string>(&p)) {
      prompts.push_back(st.tokenizer->encode(*text, /*add_special=*/true));
      if (r.echo) echoes.push_back(*text);
    } else {
      prompts.push_back(std::get<std::vector<int32_t>>(p));
      if (r.echo) echoes.push_back(st.tokenizer->decode(prompts.back()));
    }
    if (prompts.back().empty()) throw ApiError(400, "'prompt' must not be empty", "prompt");
  }
  if (!r.echo) echoes.assign(prompts.size(), "");
  SamplingParams params = r.gen.sampling;
  params.structured = st.structured_output(r.gen.grammar);
  if (r.logprobs) params.logprobs = *r.logprobs;
  if (r.echo && r.logprobs) params.prompt_logprobs = *r.logprobs;
  // max_tokens 0 (with echo): the engine draws one token, which the response leaves out.
  const bool echo_only = r.gen.max_tokens == 0;
  const std::string id = st.new_id("cmpl");
  std::vector<Submitted> subs =
      submit_all(st, id, prompts, params, echo_only ? std::optional<int>(1) : r.gen.max_tokens, "prompt");
  const size_t n = size_t(params.n);
  if (r.gen.stream) {
    stream_response(st, res, std::move(subs),
                    std::make_unique<CompletionChunks>(st, id, r, std::move(echoes), std::move(prompts), n));
    return;
  }
  const std::vector<RequestOutput> wholes = collect(st, subs);
  Json choices = Json::array();
  Usage usage;
  for (size_t p = 0; p < subs.size(); ++p) {
    const RequestOutput& whole = wholes[p];
    usage.prompt += whole.metrics.num_prompt_tokens;
    usage.cached += whole.metrics.num_cached_tokens;
    for (const CompletionOutput& c : whole.outputs) {
      Json logprobs;
      if (r.logprobs) {
        CompletionLogprobs lp(st, r.echo ? 0 : echoes[p].size());
        if (r.echo) lp.add_prompt(prompts[p], whole);
        if (!echo_only) lp.add_completion(c);
        logprobs = lp.json();
      }
      const bool aborted = c.finish_reason == "abort";
      usage.completion += echo_only ? 0 : int64_t(c.token_ids.size());
      choices.push_back({{"index", p * n + size_t(c.index)},
                         {"text", echo_only ? echoes[p] : echoes[p] + c.text},
                         {"logprobs", std::move(logprobs)},
                         {"finish_reason", finish_json(echo_only && !aborted ? "length" : c.finish_reason)},
                         {"stop_reason", echo_only ? Json() : stop_reason_json(c)}});
    }
  }
  send_json(res, {{"id", id},
                  {"object", "text_completion"},
                  {"created", int64_t(std::time(nullptr))},
                  {"model", st.model_name},
                  {"choices", std::move(choices)},
                  {"usage", usage.json()}});
}

void handle_chat(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  const ChatRequest r = parse_chat_request(parse_body(req.body, st.options.limits), st.options.limits, st.tool_call_format);
  st.check_model(r.gen.model);
  const std::string prompt_text = render_chat(st, r);
  // A structured output starts at once: the grammar leaves no room for reasoning, so the whole
  // output is content even when the prompt opens a reasoning block.
  const bool thinking = !r.gen.grammar && prompt_opens_reasoning(prompt_text);
  std::vector<std::vector<int32_t>> prompts = {st.tokenizer->encode(prompt_text, false)};
  if (prompts[0].empty()) throw ApiError(400, "the rendered conversation is empty", "messages");
  const std::string id = st.new_id("chatcmpl");
  SamplingParams params = chat_sampling(r);
  params.structured = st.structured_output(r.gen.grammar);
  std::vector<Submitted> subs = submit_all(st, id, prompts, params, r.gen.max_tokens, "messages");
  if (r.gen.stream) {
    stream_response(st, res, std::move(subs), std::make_unique<ChatChunks>(st, id, r, thinking));
    return;
  }
  const RequestOutput whole = std::move(collect(st, subs)[0]);
  Json choices = Json::array();
  Usage usage;
  usage.prompt = whole.metrics.num_prompt_tokens;
  usage.cached = whole.metrics.num_cached_tokens;
  for (const CompletionOutput& c : whole.outputs) {
    usage.completion += int64_t(c.token_ids.size());
    ChatOutputParser parser(thinking, r.parse_tools() ? r.tools : Json());
    ChatMessage m;
    m.add(parser.push(c.text));
    m.add(parser.finish());
    Json message = {{"role", "assistant"}};
    const bool calls = !m.tool_calls.empty();
    message["content"] = calls && m.content.empty() ? Json() : Json(m.content);
    message["reasoning_content"] = m.reasoning.empty() ? Json() : Json(m.reasoning);
    if (calls) message["tool_calls"] = m.tool_calls;
    choices.push_back({{"index", c.index},
                       {"message", std::move(message)},
                       {"logprobs", r.logprobs ? chat_logprobs(st, c) : Json()},
                       {"finish_reason", finish_json(chat_finish(c.finish_reason, int(m.tool_calls.size())))},
                       {"stop_reason", stop_reason_json(c)}});
  }
  send_json(res, {{"id", id},
                  {"object", "chat.completion"},
                  {"created", int64_t(std::time(nullptr))},
                  {"model", st.model_name},
                  {"choices", std::move(choices)},
                  {"usage", usage.json()}});
}

}  // namespace strata::server
