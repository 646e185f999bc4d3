// strata bench serve: a load generator for an OpenAI-compatible server, like `vllm bench serve`.
//   strata bench serve --base-url http://127.0.0.1:8000 --dataset-name random --num-prompts 64
//     --random-input-len 256 --random-output-len 64 --max-concurrency 16 --ignore-eos
//     --result-file result.json     (one command line)
//
// Datasets:
// - random: per request an input and an output length drawn uniformly from
//   [floor(len * (1 - r)), ceil(len * (1 + r))] (at least 1; r = --random-range-ratio, as vLLM)
//   and a prompt of uniform random token ids below the server's vocabulary size (found by
//   bisecting POST /detokenize, which answers 400 for ids outside it; --random-vocab-size sets
//   it). On /v1/completions the ids are sent as a token-id prompt, so the input length is exact;
//   on /v1/chat/completions the server detokenizes them into the user message (the chat template
//   then adds its tokens; the input tokens reported are the server's usage.prompt_tokens).
// - sharegpt: a JSON list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
//   ...}]}; the first human turn is the prompt (text) and the turn after it, a gpt reply, gives the
//   output length. The client has no tokenizer, so that length is --sharegpt-output-len when
//   given, else the reply's characters / 4 (rounded, at least 1). Conversations are shuffled with
//   --seed and repeat when there are fewer than --num-prompts.
// Requests arrive as a Poisson process of --request-rate R per second (exponential gaps of mean
// 1/R; inf, the default, sends all at once); at most --max-concurrency are in flight (default:
// all of them, up to kMaxInFlight), one thread each. Streaming (stream_options.include_usage)
// measures per request: TTFT (until the first chunk carrying text), ITL (gaps between such
// chunks), E2E latency, output tokens (usage.completion_tokens) and TPOT = (E2E - TTFT) /
// (output tokens - 1). Percentiles interpolate linearly (numpy's default, as vLLM). A failed
// request (connection error, non-200, error event, timeout) is counted with its error.
// Exit status: 0 when at least one request completed; 1 when none did, or on a bad option or an
// unreachable server.
#include <httplib.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "strata/cli/bench_serve.h"
#include "strata/cli/latency_stats.h"
#include "strata/core/error.h"

namespace strata::cli {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr int kMaxInFlight = 1024;  // threads (requests in flight) at most without --max-concurrency

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Options {
  std::string base_url, host = "127.0.0.1", endpoint = "/v1/completions", model, api_key;
  int port = 8000;
  std::string dataset_name = "random", dataset_path;
  int random_input_len = 1024, random_output_len = 128;
  double random_range_ratio = 0.0;
  int64_t random_vocab_size = 0;  // 0: ask the server
  int sharegpt_output_len = 0;    // 0: the reply's characters / 4
  int num_prompts = 1000;
  uint64_t seed = 0;
  int max_concurrency = 0;  // 0: no limit
  std::string request_rate = "inf";
  double rate = INFINITY;
  bool ignore_eos = false, no_stream = false;
  double temperature = 0.0;
  std::optional<double> top_p;
  std::optional<int> top_k;
  double timeout = 600;
  std::string result_file;
  bool chat() const { return endpoint == "/v1/chat/completions"; }
};

// ---- the server ----

struct Target {
  std::string origin;  // scheme://host:port, for httplib::Client
  std::string prefix;  // path ahead of the routes: "" or "/PATH"
  httplib::Headers headers;

  std::string url(const std::string& route) const { return origin + prefix + route; }
  httplib::Client client(double timeout_s) const {
    httplib::Client c(origin);
    const auto sec = time_t(timeout_s);
    const auto usec = time_t((timeout_s - double(sec)) * 1e6);
    c.set_connection_timeout(sec, usec);
    c.set_read_timeout(sec, usec);
    c.set_write_timeout(sec, usec);
    return c;
  }
};

Target parse_target(const Options& o) {
  const std::string url = o.base_url.empty() ? "http://" + o.host + ":" + std::to_string(o.port) : o.base_url;
  static const std::regex re(R"(^(https?)://([^/:?#\s\[\]]+|\[[0-9a-fA-F:.]+\])(?::(\d{1,5}))?(/[^?#\s]*)?$)");
  std::smatch m;
  STRATA_CHECK(std::regex_match(url, m, re), "--base-url: expected http://HOST[:PORT][/PATH], got '", url, "'");
  const int port = m[3].matched ? std::stoi(m[3].str()) : (m[1] == "https" ? 443 : 80);
  STRATA_CHECK(port > 0 && port < 65536, "--base-url / --port: port ", port, " is outside 1..65535");
  Target t;
  t.origin = m[1].str() + "://" + m[2].str() + ":" + std::to_string(port);
  t.prefix = m[4].str();
  while (!t.prefix.empty() && t.prefix.back() == '/') t.prefix.pop_back();
  if (!o.api_key.empty()) t.headers.emplace("Authorization", "Bearer " + o.api_key);
  return t;
}

// The message of an OpenAI-shaped error body ({"error": {"message": ...}}), else the body's start.
std::string api_message(const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error")) return body.substr(0, 300);
  const Json& e = j["error"];
  return e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                            : e.dump();
}

std::string error_text(int status, const std::string& body) {
  const std::string message = api_message(body);
  return "HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + message);
}

// httplib's error, with what it means here.
std::string describe(httplib::Error e) {
  const std::string name = httplib::to_string(e);
  switch (e) {
    case httplib::Error::Connection: return name + ": cannot connect";
    case httplib::Error::ConnectionTimeout: return name + ": no connection within the timeout";
    case httplib::Error::Read: return name + ": the connection closed or failed before the whole response";
    case httplib::Error::Write: return name + ": the connection closed or failed while sending the request";
    default: return name;
  }
}

// A control request (not measured); an Error when the server cannot be reached.
httplib::Result control(const Target& t, const std::string& method, const std::string& route,
                        const Json& body = nullptr) {
  httplib::Client c = t.client(30);
  httplib::Result r = method == "GET" ? c.Get(t.prefix + route, t.headers)
                                      : c.Post(t.prefix + route, t.headers, body.dump(), "application/json");
  STRATA_CHECK(r, "cannot reach the server: ", method, " ", t.url(route), " failed (",
               describe(r.error()), "); is it running there?");
  return r;
}

// The served model: the first of GET /v1/models.
std::string first_model(const Target& t) {
  httplib::Result r = control(t, "GET", "/v1/models");
  STRATA_CHECK(r->status == 200, "GET ", t.url("/v1/models"), ": ", error_text(r->status, r->body));
  const Json j = Json::parse(r->body, nullptr, false);
  STRATA_CHECK(j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
                   j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string(),
               "GET ", t.url("/v1/models"), ": no model listed; pass --model");
  return j["data"][0]["id"].get<std::string>();
}

// POST /detokenize: the text of `ids`, or nullopt when the server answers 400 (an id outside
// the vocabulary).
std::optional<std::string> detokenize(const Target& t, const std::string& model, const std::vector<int32_t>& ids) {
  httplib::Result r = control(t, "POST", "/detokenize", Json{{"model", model}, {"tokens", ids}});
  if (r->status == 400) return std::nullopt;
  STRATA_CHECK(r->status == 200, "POST ", t.url("/detokenize"), ": ", error_text(r->status, r->body),
               " (random prompts need it; --random-vocab-size skips the vocabulary probe)");
  const Json j = Json::parse(r->body, nullptr, false);
  STRATA_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string(), "POST ",
               t.url("/detokenize"), ": the answer has no 'prompt' string");
  return j["prompt"].get<std::string>();
}

// The vocabulary size: the first id /detokenize refuses (doubling, then bisecting).
int64_t probe_vocab_size(const Target& t, const std::string& model) {
  auto valid = [&](int64_t id) { return detokenize(t, model, {int32_t(id)}).has_value(); };
  STRATA_CHECK(valid(0), "POST ", t.url("/detokenize"), " refuses token id 0; pass --random-vocab-size");
  int64_t lo = 0, hi = 1024;  // valid(lo), and hi is the candidate bound
  while (hi <= INT32_MAX && valid(hi)) lo = hi, hi *= 2;
  hi = std::min<int64_t>(hi, int64_t(INT32_MAX) + 1);
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (valid(mid) ? lo : hi) = mid;
  }
  return hi;
}

// ---- datasets ----

struct BenchRequest {
  std::vector<int32_t> ids;  // token-id prompt (random on /v1/completions)
  std::string text;          // text prompt otherwise
  int prompt_len = 0;        // exact for ids, else an estimate replaced by the server's usage
  int output_len = 0;
};

std::vector<BenchRequest> random_requests(const Options& o, const Target& t, const std::string& model,
                                          std::mt19937_64& rng) {
  int64_t vocab = o.random_vocab_size;
  if (vocab == 0) {
    vocab = probe_vocab_size(t, model);
    std::fprintf(stderr, "strata bench serve: vocabulary of %lld tokens (probed with /detokenize)\n",
                 (long long)vocab);
  }
  auto bounds = [&](int len) {
    const int lo = std::max(1, int(std::floor(len * (1 - o.random_range_ratio))));
    const int hi = int(std::ceil(len * (1 + o.random_range_ratio)));
    return std::uniform_int_distribution<int>(lo, std::max(lo, hi));
  };
  auto in_len = bounds(o.random_input_len), out_len = bounds(o.random_output_len);
  std::uniform_int_distribution<int32_t> id(0, int32_t(vocab - 1));
  std::vector<BenchRequest> out(size_t(o.num_prompts));
  for (BenchRequest& r : out) {
    r.prompt_len = in_len(rng);
    r.output_len = out_len(rng);
    for (int i = 0; i < r.prompt_len; ++i) r.ids.push_back(id(rng));
  }
  if (o.chat()) {
    for (BenchRequest& r : out) {
      std::optional<std::string> text = detokenize(t, model, r.ids);
      STRATA_CHECK(text, "POST ", t.url("/detokenize"), " refused a random prompt; is --random-vocab-size ",
                   vocab, " above the model's vocabulary?");
      r.text = std::move(*text);
      r.ids.clear();
    }
  }
  return out;
}

std::vector<BenchRequest> sharegpt_requests(const Options& o, std::mt19937_64& rng) {
  const std::string& path = o.dataset_path;
  STRATA_CHECK(!path.empty(), "--dataset-name sharegpt needs --dataset-path FILE");
  std::ifstream f(path);
  STRATA_CHECK(f, "--dataset-path: cannot open '", path, "'");
  const Json j = Json::parse(f, nullptr, false);
  STRATA_CHECK(!j.is_discarded(), "--dataset-path: '", path, "' is not valid JSON");
  STRATA_CHECK(j.is_array(), "--dataset-path: '", path, "' must hold a JSON list of {\"conversations\": [...]}");
  auto turn = [](const Json& c, size_t i, std::initializer_list<const char*> from) -> const Json* {
    if (i >= c.size() || !c[i].is_object() || !c[i].contains("value") || !c[i]["value"].is_string()) return nullptr;
    const Json& who = c[i].value("from", Json());
    for (const char* name : from) {
      if (who == name) return &c[i]["value"];
    }
    return nullptr;
  };
  std::vector<BenchRequest> pool;
  for (const Json& e : j) {
    if (!e.is_object() || !e.contains("conversations") || !e["conversations"].is_array()) continue;
    const Json& c = e["conversations"];
    for (size_t i = 0; i < c.size(); ++i) {
      const Json* human = turn(c, i, {"human", "user"});
      if (!human) continue;
      const Json* reply = turn(c, i + 1, {"gpt", "assistant", "chatgpt"});
      const std::string prompt = human->get<std::string>();
      if (reply && !prompt.empty()) {
        const size_t chars = reply->get<std::string>().size();
        BenchRequest r;
        r.text = prompt;
        r.prompt_len = int(std::max<size_t>(1, (prompt.size() + 2) / 4));
        r.output_len = o.sharegpt_output_len > 0 ? o.sharegpt_output_len
                                                 : int(std::max<size_t>(1, (chars + 2) / 4));
        pool.push_back(std::move(r));
      }
      break;  // only the first human turn
    }
  }
  STRATA_CHECK(!pool.empty(), "--dataset-path: '", path, "' has no conversation whose first human turn is "
               "followed by a gpt reply");
  std::shuffle(pool.begin(), pool.end(), rng);
  if (int(pool.size()) < o.num_prompts) {
    std::fprintf(stderr, "strata bench serve: %zu conversations for %d prompts; they repeat\n", pool.size(),
                 o.num_prompts);
  }
  std::vector<BenchRequest> out;
  for (int i = 0; i < o.num_prompts; ++i) out.push_back(pool[size_t(i) % pool.size()]);
  return out;
}

// ---- one request ----

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;  // seconds from sending
  std::vector<double> itl;   // seconds between chunks carrying text
  int64_t prompt_tokens = 0, output_tokens = 0;
  int64_t text_chunks = 0;
};

Json request_body(const Options& o, const std::string& model, const BenchRequest& r) {
  Json b = {{"model", model}};
  if (o.chat()) {
    b["messages"] = Json::array({Json{{"role", "user"}, {"content", r.text}}});
    b["max_completion_tokens"] = r.output_len;
  } else {
    if (!r.ids.empty()) b["prompt"] = r.ids;
    else b["prompt"] = r.text;
    b["max_tokens"] = r.output_len;
  }
  b["temperature"] = o.temperature;
  if (o.top_p) b["top_p"] = *o.top_p;
  if (o.top_k) b["top_k"] = *o.top_k;
  if (o.ignore_eos) b["ignore_eos"] = true;
  if (!o.no_stream) {
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
  }
  return b;
}

// Whether a choice of a completion or chat chunk carries generated text.
bool carries_text(const Json& choice) {
  auto nonempty = [](const Json& o, const char* key) {
    if (!o.is_object() || !o.contains(key)) return false;
    const Json& v = o[key];
    return (v.is_string() && !v.get<std::string>().empty()) || (v.is_array() && !v.empty());
  };
  if (nonempty(choice, "text")) return true;
  const Json& d = choice.is_object() ? choice.value("delta", Json()) : Json();
  return nonempty(d, "content") || nonempty(d, "reasoning_content") || nonempty(d, "tool_calls");
}

void read_usage(const Json& j, RequestResult& r) {
  if (!j.is_object() || !j.contains("usage") || !j["usage"].is_object()) return;
  const Json& u = j["usage"];
  if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) r.prompt_tokens = u["prompt_tokens"];
  if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
    r.output_tokens = u["completion_tokens"];
  }
}

// Server-sent events of a streamed response: "data: {...}" lines up to "data: [DONE]".
class SseReader {
 public:
  SseReader(Clock::time_point start, RequestResult& r) : start_(start), r_(r) {}
  // False on an error event or bad JSON (r.error says which).
  bool feed(const char* data, size_t n) {
    const double t = seconds_since(start_);
    buf_.append(data, n);
    size_t from = 0;
    for (size_t nl; (nl = buf_.find('\n', from)) != std::string::npos; from = nl + 1) {
      std::string_view line(buf_.data() + from, nl - from);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!on_line(line, t)) return false;
    }
    buf_.erase(0, from);
    return true;
  }
  bool done() const { return done_; }

 private:
  bool on_line(std::string_view line, double t) {
    if (line.substr(0, 5) != "data:") return true;  // blank separators, comments, other fields
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line == "[DONE]") {
      done_ = true;
      return true;
    }
    const Json j = Json::parse(line, nullptr, false);
    if (!j.is_object()) {
      r_.error = "invalid JSON in the stream: " + std::string(line.substr(0, 200));
      return false;
    }
    if (j.contains("error")) {
      r_.error = "error event in the stream: " + api_message(std::string(line));
      return false;
    }
    read_usage(j, r_);
    const Json& choices = j.value("choices", Json());
    if (!choices.is_array() || !std::any_of(choices.begin(), choices.end(), carries_text)) return true;
    if (r_.text_chunks++ == 0) r_.ttft = t;
    else r_.itl.push_back(t - last_);
    last_ = t;
    return true;
  }

  Clock::time_point start_;
  RequestResult& r_;
  std::string buf_;
  double last_ = 0;
  bool done_ = false;
};

RequestResult send_request(const Options& o, const Target& t, const std::string& body) try {
  RequestResult r;
  httplib::Client client = t.client(o.timeout);
  httplib::Request req;
  req.method = "POST";
  req.path = t.prefix + o.endpoint;
  req.headers = t.headers;
  req.set_header("Content-Type", "application/json");
  req.body = body;
  const Clock::time_point start = Clock::now();
  SseReader sse(start, r);
  int status = 0;
  bool timed_out = false;
  std::string whole;  // the body, when not a stream
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (seconds_since(start) > o.timeout) {
      timed_out = true;
      return false;
    }
    if (status == 200 && !o.no_stream) return sse.feed(data, n);
    whole.append(data, n);
    return whole.size() < (64u << 20);
  };
  httplib::Result res = client.send(req);
  r.e2e = seconds_since(start);
  if (timed_out || (!res && r.e2e >= o.timeout)) {
    char text[64];
    std::snprintf(text, sizeof text, "timed out after %g s", o.timeout);
    r.error = text;
  } else if (!r.error.empty()) {
    // an error event or bad JSON in the stream
  } else if (!res) {
    r.error = "request failed: " + describe(res.error());
  } else if (res->status != 200) {
    r.error = error_text(res->status, whole);
  } else if (o.no_stream) {
    const Json j = Json::parse(whole, nullptr, false);
    if (!j.is_object() || !j.contains("choices")) {
      r.error = "invalid response body: " + whole.substr(0, 200);
    } else {
      read_usage(j, r);
      r.ttft = r.e2e;
      r.ok = true;
    }
  } else if (!sse.done()) {
    r.error = "the stream ended without 'data: [DONE]'";
  } else {
    if (r.text_chunks == 0) r.ttft = r.e2e;
    if (r.output_tokens == 0) r.output_tokens = r.text_chunks;  // no usage chunk
    r.ok = true;
  }
  return r;
} catch (const std::exception& e) {
  RequestResult r;
  r.error = std::string("client error: ") + e.what();
  return r;
}

// ---- the run and its report ----

void print_row(const char* label, const std::string& value) { std::printf("%-40s %s\n", label, value.c_str()); }
std::string fmt(double x, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}
void print_title(const std::string& title, char fill) {
  const size_t left = (50 - std::min<size_t>(50, title.size())) / 2;
  std::printf("%s%s%s\n", std::string(left, fill).c_str(), title.c_str(),
              std::string(50 - left - std::min<size_t>(50, title.size()), fill).c_str());
}

// Sends the requests at their arrival times, each on a free thread of the pool.
struct LoadRun {
  std::vector<RequestResult> results;  // in request order
  double duration = 0;                 // seconds, from the first arrival to the last answer
  int peak_in_flight = 0;
};

LoadRun run_load(const Options& o, const Target& target, const std::vector<std::string>& bodies,
                 const std::vector<double>& arrival, size_t workers) {
  const size_t n = bodies.size();
  LoadRun run;
  run.results.resize(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t released = 0, taken = 0;  // requests due, requests picked up
  std::atomic<int> in_flight{0}, peak{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w) {
    pool.emplace_back([&] {
      for (;;) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return taken < released || taken >= n; });
          if (taken >= n) return;
          i = taken++;
        }
        const int now = ++in_flight;
        for (int p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {
        }
        run.results[i] = send_request(o, target, bodies[i]);
        --in_flight;
      }
    });
  }
  for (size_t i = 0; i < n; ++i) {
    if (arrival[i] > 0) std::this_thread::sleep_until(start + std::chrono::duration<double>(arrival[i]));
    {
      std::lock_guard<std::mutex> lock(mu);
      released = std::isinf(o.rate) ? n : i + 1;
    }
    cv.notify_all();
    if (std::isinf(o.rate)) break;
  }
  for (std::thread& t : pool) t.join();
  run.duration = seconds_since(start);
  run.peak_in_flight = peak.load();
  return run;
}

struct Metric {
  const char* key;    // of the result file: mean_KEY_ms, ...
  const char* name;   // of the table
  const char* title;
  LatencyStats ms;
};

// The numbers of a run: totals and statistics over the completed requests, per-request lists
// over all of them (zeros for the failed, as vLLM).
struct Report {
  int completed = 0, failed = 0, peak_in_flight = 0;
  int64_t total_in = 0, total_out = 0;
  double duration = 0;
  std::vector<Metric> metrics;
  Json per_request = Json::object();
};

Report summarize(const std::vector<BenchRequest>& requests, const LoadRun& run) {
  Report rep;
  rep.duration = run.duration;
  rep.peak_in_flight = run.peak_in_flight;
  std::vector<double> ttft, tpot, itl, e2e;
  Json input_lens = Json::array(), output_lens = Json::array(), ttfts = Json::array(), e2els = Json::array(),
       itls = Json::array(), errors = Json::array();
  for (size_t i = 0; i < run.results.size(); ++i) {
    const RequestResult& r = run.results[i];
    const int64_t prompt = r.prompt_tokens > 0 ? r.prompt_tokens : requests[i].prompt_len;  // the server's count
    input_lens.push_back(prompt);
    output_lens.push_back(r.ok ? r.output_tokens : 0);
    ttfts.push_back(r.ok ? r.ttft : 0.0);
    e2els.push_back(r.ok ? r.e2e : 0.0);
    itls.push_back(r.ok ? Json(r.itl) : Json::array());
    errors.push_back(r.error);
    if (!r.ok) continue;
    ++rep.completed;
    rep.total_in += prompt;
    rep.total_out += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) * 1e3 / double(r.output_tokens - 1));
    for (double g : r.itl) itl.push_back(g * 1e3);
  }
  rep.failed = int(run.results.size()) - rep.completed;
  rep.metrics = {{"ttft", "TTFT", "Time to First Token", latency_stats(ttft)},
                 {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", latency_stats(tpot)},
                 {"itl", "ITL", "Inter-token Latency", latency_stats(itl)},
                 {"e2el", "E2EL", "End-to-end Latency", latency_stats(e2e)}};
  rep.per_request = {{"input_lens", input_lens}, {"output_lens", output_lens}, {"ttfts", ttfts},
                     {"e2els", e2els},           {"itls", itls},               {"errors", errors}};
  return rep;
}

// vLLM's "Serving Benchmark Result" table.
void print_report(const Options& o, const Report& rep) {
  print_title(" Serving Benchmark Result ", '=');
  print_row("Successful requests:", std::to_string(rep.completed));
  print_row("Failed requests:", std::to_string(rep.failed));
  print_row("Maximum request concurrency:", o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "unlimited");
  print_row("Request rate configured (RPS):", std::isinf(o.rate) ? "inf" : fmt(o.rate));
  print_row("Benchmark duration (s):", fmt(rep.duration));
  print_row("Total input tokens:", std::to_string(rep.total_in));
  print_row("Total generated tokens:", std::to_string(rep.total_out));
  print_row("Request throughput (req/s):", fmt(rep.completed / rep.duration));
  print_row("Output token throughput (tok/s):", fmt(double(rep.total_out) / rep.duration));
  print_row("Peak concurrent requests:", std::to_string(rep.peak_in_flight));
  print_row("Total token throughput (tok/s):", fmt(double(rep.total_in + rep.total_out) / rep.duration));
  for (const Metric& m : rep.metrics) {
    print_title(m.title, '-');
    const std::string name = m.name;
    print_row(("Mean " + name + " (ms):").c_str(), fmt(m.ms.mean));
    print_row(("Median " + name + " (ms):").c_str(), fmt(m.ms.median));
    print_row(("P90 " + name + " (ms):").c_str(), fmt(m.ms.p90));
    print_row(("P99 " + name + " (ms):").c_str(), fmt(m.ms.p99));
  }
  print_title("", '=');
  std::fflush(stdout);
}

// The result file: vLLM's keys, the configuration, then the per-request lists.
Json result_json(const Options& o, const Target& target, const std::string& model, const Report& rep) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  const Json rate = std::isinf(o.rate) ? Json("inf") : Json(o.rate);
  const Json concurrency = o.max_concurrency > 0 ? Json(o.max_concurrency) : Json();
  const Json config = {{"base_url", target.origin + target.prefix}, {"endpoint", o.endpoint}, {"model", model},
                       {"dataset_name", o.dataset_name}, {"dataset_path", o.dataset_path},
                       {"num_prompts", o.num_prompts}, {"random_input_len", o.random_input_len},
                       {"random_output_len", o.random_output_len}, {"random_range_ratio", o.random_range_ratio},
                       {"random_vocab_size", o.random_vocab_size > 0 ? Json(o.random_vocab_size) : Json()},
                       {"sharegpt_output_len", o.sharegpt_output_len > 0 ? Json(o.sharegpt_output_len) : Json()},
                       {"seed", o.seed}, {"max_concurrency", concurrency}, {"request_rate", rate},
                       {"ignore_eos", o.ignore_eos}, {"stream", !o.no_stream}, {"temperature", o.temperature},
                       {"top_p", o.top_p ? Json(*o.top_p) : Json()}, {"top_k", o.top_k ? Json(*o.top_k) : Json()},
                       {"timeout", o.timeout}};
  Json out = {{"date", date}, {"backend", "openai"}, {"model_id", model}, {"num_prompts", o.num_prompts},
              {"request_rate", rate}, {"max_concurrency", concurrency}, {"duration", rep.duration},
              {"completed", rep.completed}, {"failed", rep.failed}, {"total_input_tokens", rep.total_in},
              {"total_output_tokens", rep.total_out}, {"request_throughput", rep.completed / rep.duration},
              {"output_throughput", double(rep.total_out) / rep.duration},
              {"total_token_throughput", double(rep.total_in + rep.total_out) / rep.duration},
              {"max_concurrent_requests", rep.peak_in_flight}};
  for (const Metric& m : rep.metrics) {
    const std::string k = std::string("_") + m.key + "_ms";
    out["mean" + k] = m.ms.mean;
    out["median" + k] = m.ms.median;
    out["std" + k] = m.ms.std;
    out["p90" + k] = m.ms.p90;
    out["p99" + k] = m.ms.p99;
  }
  out["config"] = config;
  for (const auto& [key, list] : rep.per_request.items()) out[key] = list;
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"Load generator for an OpenAI-compatible server (like vllm bench serve)", "strata bench serve"};
  Options o;
  auto* base = app.add_option("--base-url", o.base_url,
                              "server address, http://HOST:PORT[/PATH] (default http://127.0.0.1:8000)");
  app.add_option("--host", o.host, "server host when no --base-url (default 127.0.0.1)")->excludes(base);
  app.add_option("--port", o.port, "server port when no --base-url (default 8000)")->excludes(base);
  app.add_option("--endpoint", o.endpoint, "/v1/completions (default) or /v1/chat/completions")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}));
  app.add_option("--model", o.model, "served model name (default: the first of GET /v1/models)");
  app.add_option("--api-key", o.api_key, "sent as 'Authorization: Bearer KEY'");
  app.add_option("--dataset-name", o.dataset_name, "random (default) or sharegpt")
      ->check(CLI::IsMember({"random", "sharegpt"}));
  app.add_option("--dataset-path", o.dataset_path, "ShareGPT JSON file (--dataset-name sharegpt)");
  app.add_option("--random-input-len", o.random_input_len, "prompt tokens per request (default 1024)");
  app.add_option("--random-output-len", o.random_output_len, "output tokens per request (default 128)");
  app.add_option("--random-range-ratio", o.random_range_ratio,
                 "lengths uniform in [len*(1-r), len*(1+r)], 0 <= r < 1 (default 0)");
  app.add_option("--random-vocab-size", o.random_vocab_size,
                 "random ids below this (default: probed with /detokenize)");
  app.add_option("--sharegpt-output-len", o.sharegpt_output_len,
                 "output tokens per ShareGPT request (default: reply characters / 4)");
  app.add_option("--num-prompts", o.num_prompts, "requests (default 1000)");
  app.add_option("--seed", o.seed, "seed of the dataset and the arrivals (default 0)");
  app.add_option("--max-concurrency", o.max_concurrency, "requests in flight at most (default: all)");
  app.add_option("--request-rate", o.request_rate,
                 "requests per second, Poisson arrivals; inf: all at once (default)");
  app.add_flag("--ignore-eos", o.ignore_eos, "send ignore_eos: true (generate the full output length)");
  app.add_flag("--no-stream", o.no_stream, "plain responses instead of streams (TTFT = E2E, no ITL)");
  app.add_option("--temperature", o.temperature, "sampling temperature (default 0: greedy)");
  app.add_option("--top-p", o.top_p, "top_p (default: not sent)");
  app.add_option("--top-k", o.top_k, "top_k (default: not sent)");
  app.add_option("--timeout", o.timeout, "seconds per request (default 600)");
  app.add_option("--result-file", o.result_file, "write the results and the configuration as JSON");
  CLI11_PARSE(app, argc, argv);

  STRATA_CHECK(o.num_prompts > 0, "--num-prompts must be positive, got ", o.num_prompts);
  STRATA_CHECK(o.random_input_len > 0, "--random-input-len must be positive, got ", o.random_input_len);
  STRATA_CHECK(o.random_output_len > 0, "--random-output-len must be positive, got ",
               o.random_output_len);
  STRATA_CHECK(o.random_range_ratio >= 0 && o.random_range_ratio < 1,
               "--random-range-ratio must be in [0, 1), got ", o.random_range_ratio);
  STRATA_CHECK(o.random_vocab_size >= 0 && o.random_vocab_size <= INT32_MAX,
               "--random-vocab-size must be positive");
  STRATA_CHECK(o.sharegpt_output_len >= 0, "--sharegpt-output-len must be positive, got ",
               o.sharegpt_output_len);
  STRATA_CHECK(o.max_concurrency >= 0, "--max-concurrency must be positive, got ", o.max_concurrency);
  STRATA_CHECK(o.timeout > 0 && o.timeout < 1e6, "--timeout must be positive seconds, got ", o.timeout);
  STRATA_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  STRATA_CHECK(o.dataset_name == "sharegpt" || o.dataset_path.empty(),
               "--dataset-path needs --dataset-name sharegpt");
  {
    char* end = nullptr;
    o.rate = std::strtod(o.request_rate.c_str(), &end);
    STRATA_CHECK(!o.request_rate.empty() && *end == 0 && o.rate > 0 && !std::isnan(o.rate),
                 "--request-rate must be a positive number or inf, got '", o.request_rate, "'");
  }
  std::signal(SIGPIPE, SIG_IGN);  // a server closing a connection must not end the benchmark

  const Target target = parse_target(o);
  std::mt19937_64 rng(o.seed);
  std::vector<BenchRequest> requests;
  // A ShareGPT file first: a bad one fails before any request.
  if (o.dataset_name == "sharegpt") requests = sharegpt_requests(o, rng);
  const std::string model = o.model.empty() ? first_model(target) : o.model;
  if (o.dataset_name == "random") requests = random_requests(o, target, model, rng);
  std::vector<std::string> bodies;
  for (const BenchRequest& r : requests) bodies.push_back(request_body(o, model, r).dump());
  std::vector<double> arrival(requests.size(), 0.0);  // seconds after the start
  std::exponential_distribution<double> gap(std::isinf(o.rate) ? 1.0 : o.rate);
  for (size_t i = 1; i < arrival.size() && !std::isinf(o.rate); ++i) arrival[i] = arrival[i - 1] + gap(rng);
  const size_t workers =
      std::min<size_t>(requests.size(), o.max_concurrency > 0 ? size_t(o.max_concurrency) : size_t(kMaxInFlight));
  std::fprintf(stderr, "strata bench serve: %zu requests to %s (model '%s'), max concurrency %s, "
               "request rate %s, %zu threads\n", requests.size(), target.url(o.endpoint).c_str(), model.c_str(),
               o.max_concurrency > 0 ? std::to_string(o.max_concurrency).c_str() : "unlimited",
               o.request_rate.c_str(), workers);

  const LoadRun run = run_load(o, target, bodies, arrival, workers);
  const Report report = summarize(requests, run);
  print_report(o, report);
  int shown = 0;
  for (size_t i = 0; i < run.results.size() && shown < 5; ++i) {
    if (run.results[i].ok) continue;
    std::fprintf(stderr, "strata bench serve: request %zu failed: %s\n", i, run.results[i].error.c_str());
    ++shown;
  }
  if (!o.result_file.empty()) {
    std::ofstream f(o.result_file);
    f << result_json(o, target, model, report).dump(2) << "\n";
    STRATA_CHECK(f.good(), "--result-file: cannot write '", o.result_file, "'");
  }
  STRATA_CHECK(report.completed > 0, "all ", run.results.size(), " requests failed; the first: ",
               run.results[0].error);
  return 0;
}

}  // namespace

int run_bench_serve(int argc, char** argv) { return run(argc, argv); }

}  // namespace strata::cli
