// POST /v1/responses: a Responses request runs as a chat request (responses_protocol.h); its
// output is split into reasoning, message and function_call items (responses_output.h), whole
// or streamed as the Responses API's server-sent events.
#include <algorithm>
#include <ctime>

#include "strata/server/http_connections.h"
#include "strata/server/responses_output.h"
#include "strata/server/responses_protocol.h"
#include "strata/server/server_state.h"

namespace strata::server {

namespace {

// "resp_1234" -> "1234": the tail that the response's and its items' ids share.
std::string id_tail(const std::string& id) { return id.substr(id.find('_') + 1); }

struct ResponseUsage {
  int64_t input = 0, cached = 0, output = 0;
  Json json() const {
    return {{"input_tokens", input},
            {"input_tokens_details", {{"cached_tokens", cached}}},
            {"output_tokens", output},
            {"output_tokens_details", {{"reasoning_tokens", 0}}},
            {"total_tokens", input + output}};
  }
};

// The response object; `status`: in_progress, completed, incomplete or cancelled.
Json response_json(const ServerState& st, const ResponsesRequest& r, const std::string& id, int64_t created,
                   const std::string& status, Json output, const ResponseUsage* usage) {
  const SamplingParams& s = r.chat.gen.sampling;
  Json j = {{"id", id},
            {"object", "response"},
            {"created_at", created},
            {"status", status},
            {"background", false},
            {"error", nullptr},
            {"incomplete_details", status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json()},
            {"instructions", r.instructions ? Json(*r.instructions) : Json()},
            {"max_output_tokens", r.chat.gen.max_tokens ? Json(*r.chat.gen.max_tokens) : Json()},
            {"metadata", r.metadata},
            {"model", st.model_name},
            {"output", std::move(output)},
            {"parallel_tool_calls", r.chat.parallel_tool_calls},
            {"previous_response_id", nullptr},
            {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
            {"store", false},
            {"temperature", s.temperature ? Json(*s.temperature) : Json()},
            {"text", {{"format", {{"type", "text"}}}}},
            {"tool_choice", r.tool_choice},
            {"tools", r.tools},
            {"top_p", s.top_p ? Json(*s.top_p) : Json()},
            {"truncation", "disabled"},
            {"usage", usage ? usage->json() : Json()},
            {"user", r.user}};
  return j;
}

std::string final_status(const std::string& finish_reason) {
  if (finish_reason == "length") return "incomplete";
  if (finish_reason == "abort") return "cancelled";
  return "completed";
}

struct ResponseStream {
  ServerState* st = nullptr;
  ResponsesRequest request;
  std::string id;
  int64_t created = 0;
  Submitted sub;
  ChatOutputParser parser;
  ResponseItems items;
  ResponseUsage usage;
  int64_t sequence = 0;
  bool started = false, done = false;

  ResponseStream(ServerState& s, ResponsesRequest r, std::string rid, Submitted submitted, bool thinking)
      : st(&s), request(std::move(r)), id(std::move(rid)), created(std::time(nullptr)), sub(std::move(submitted)),
        parser(thinking, request.chat.parse_tools() ? request.chat.tools : Json()), items(id_tail(id)) {}

  bool send(httplib::DataSink& sink, Json event) {
    event["sequence_number"] = sequence++;
    const std::string text = "event: " + event["type"].get<std::string>() + "\ndata: " +
                             event.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
    return sink.write(text.data(), text.size());
  }

  bool send_all(httplib::DataSink& sink, std::vector<Json> events) {
    for (Json& e : events) {
      if (!send(sink, std::move(e))) return false;
    }
    return true;
  }

  // Writes what the next delta brings; false when the client is gone.
  bool pump(httplib::DataSink& sink) {
    if (!started) {
      started = true;
      const Json snapshot = response_json(*st, request, id, created, "in_progress", Json::array(), nullptr);
      if (!send(sink, {{"type", "response.created"}, {"response", snapshot}})) return false;
      if (!send(sink, {{"type", "response.in_progress"}, {"response", snapshot}})) return false;
    }
    if (client_disconnected()) return false;
    RequestOutput d;
    const RequestStream::Status s = sub.stream->next(&d, 0.1);
    if (s == RequestStream::kTimeout) return true;
    if (s == RequestStream::kFinished) {
      const std::string error = sub.stream->error();
      if (!send(sink, {{"type", "error"}, {"code", "engine_error"}, {"message", error.empty() ? "the request ended" : error},
                       {"param", nullptr}})) {
        return false;
      }
      done = true;
      sink.done();
      return true;
    }
    std::string finish;
    for (const CompletionOutput& c : d.outputs) {
      usage.output += int64_t(c.token_ids.size());
      ChatDelta cd = parser.push(c.text);
      if (!send_all(sink, items.push(cd))) return false;
      if (c.finished()) {
        finish = c.finish_reason;
        if (!send_all(sink, items.push(parser.finish()))) return false;
      }
    }
    if (!d.finished) return true;
    usage.input = d.metrics.num_prompt_tokens;
    usage.cached = d.metrics.num_cached_tokens;
    const std::string status = final_status(finish);
    if (!send_all(sink, items.finish(status == "incomplete" ? "incomplete" : "completed"))) return false;
    const Json whole = response_json(*st, request, id, created, status, items.output(), &usage);
    if (!send(sink, {{"type", "response.completed"}, {"response", whole}})) return false;
    done = true;
    sink.done();
    return true;
  }
};

}  // namespace

void handle_responses(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  ResponsesRequest r = parse_responses_request(parse_body(req.body, st.options.limits), st.options.limits, st.tool_call_format);
  st.check_model(r.chat.gen.model);
  const std::string prompt_text = render_chat(st, r.chat);
  const bool thinking = !r.chat.gen.grammar && prompt_opens_reasoning(prompt_text);
  const std::vector<std::vector<int32_t>> prompts = {st.tokenizer->encode(prompt_text, false)};
  if (prompts[0].empty()) throw ApiError(400, "the rendered conversation is empty", "input");
  std::string id = st.new_id("resp");
  std::replace(id.begin(), id.end(), '-', '_');
  SamplingParams params = r.chat.gen.sampling;
  params.structured = st.structured_output(r.chat.gen.grammar);  // tool_choice required / named
  std::vector<Submitted> subs = submit_all(st, id, prompts, params, r.chat.gen.max_tokens, "input");
  if (r.chat.gen.stream) {
    auto job = std::make_shared<ResponseStream>(st, std::move(r), id, std::move(subs[0]), thinking);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [job](size_t, httplib::DataSink& sink) { return job->pump(sink); },
        [job](bool) {
          if (!job->done) job->st->loop->abort(job->sub.id);
        });
    return;
  }
  const RequestOutput whole = std::move(collect(st, subs)[0]);
  const CompletionOutput& c = whole.outputs.at(0);
  ChatOutputParser parser(thinking, r.chat.parse_tools() ? r.chat.tools : Json());
  ResponseItems items(id_tail(id));
  items.push(parser.push(c.text));
  items.push(parser.finish());
  const std::string status = final_status(c.finish_reason);
  items.finish(status == "incomplete" ? "incomplete" : "completed");
  ResponseUsage usage;
  usage.input = whole.metrics.num_prompt_tokens;
  usage.cached = whole.metrics.num_cached_tokens;
  usage.output = int64_t(c.token_ids.size());
  send_json(res, response_json(st, r, id, int64_t(std::time(nullptr)), status, items.output(), &usage));
}

}  // namespace strata::server
