// strata tokenize / detokenize: JSON lines in, JSON lines out.
//   strata tokenize [--model DIR] [--special]        "text" per line  -> [ids] per line
//   strata detokenize [--model DIR] [--skip-special] [ids] per line -> "text" per line
// (an id outside the vocabulary is an error, as on the server)
// strata bench-tokenizer [--model DIR] --input FILE: single-threaded encode speed in MB/s.
#include <time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/core/error.h"
#include "strata/tokenizer/tokenizer.h"

namespace {

using json = nlohmann::json;

// Runs a CLI11 app over argv; returns -1 to go on, else the exit code.
int parse_args(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

void add_model_option(CLI::App& app, std::string& model) {
  app.add_option("--model", model, "model folder holding tokenizer.json (default: the bundled model)");
}

int run_tokenize(int argc, char** argv) {
  CLI::App app("Encode JSON strings read one per line on stdin; print a JSON array of ids each.",
               "strata tokenize");
  std::string model;
  bool special = false;
  add_model_option(app, model);
  app.add_flag("--special", special, "add the special tokens of the post-processor (e.g. BOS)");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;
  strata::Tokenizer tok = strata::Tokenizer::load(strata::cli::model_dir_or_default(model));
  std::string line;
  std::vector<int32_t> ids;
  size_t lineno = 0;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      strata::fail("stdin line ", lineno, ": malformed JSON: ", e.what());
    }
    if (!j.is_string()) strata::fail("stdin line ", lineno, ": expected a JSON string");
    ids.clear();
    tok.encode(j.get_ref<const std::string&>(), special, &ids);
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int run_detokenize(int argc, char** argv) {
  CLI::App app("Decode JSON arrays of ids read one per line on stdin; print a JSON string each.",
               "strata detokenize");
  std::string model;
  bool skip = false;
  add_model_option(app, model);
  app.add_flag("--skip-special", skip, "drop special tokens");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;
  strata::Tokenizer tok = strata::Tokenizer::load(strata::cli::model_dir_or_default(model));
  const int64_t vocab = tok.vocab_size();
  std::string line;
  size_t lineno = 0;
  std::vector<int32_t> ids;
  while (std::getline(std::cin, line)) {
    ++lineno;
    if (line.empty() || line == "\r") continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      strata::fail("stdin line ", lineno, ": malformed JSON: ", e.what());
    }
    if (!j.is_array()) strata::fail("stdin line ", lineno, ": expected a JSON array of ids");
    ids.clear();
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() > INT32_MAX) {
        strata::fail("stdin line ", lineno, ": element ", i, ": expected a non-negative id");
      }
      if (j[i].get<int64_t>() >= vocab) {
        strata::fail("stdin line ", lineno, ": element ", i, ": id ", j[i].get<int64_t>(),
                     " is outside the vocabulary (", vocab, " tokens)");
      }
      ids.push_back(j[i].get<int32_t>());
    }
    std::string out = json(tok.decode(ids, skip)).dump() + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

int run_bench(int argc, char** argv) {
  CLI::App app("Encode a text file single-threaded and print the speed.", "strata bench-tokenizer");
  std::string model, input;
  int repeat = 3;
  size_t chunk = 0;
  add_model_option(app, model);
  app.add_option("--input", input, "UTF-8 text file to encode")->required();
  app.add_option("--repeat", repeat, "timed passes (the best is printed)");
  app.add_option("--chunk", chunk, "encode the file in documents of about this many bytes");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;
  strata::Tokenizer tok = strata::Tokenizer::load(strata::cli::model_dir_or_default(model));
  std::ifstream f(input, std::ios::binary);
  if (!f) strata::fail(input, ": cannot open file");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  // Documents end at a newline so that no UTF-8 character is cut.
  std::vector<std::string_view> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = chunk == 0 ? text.size() : text.find('\n', std::min(text.size(), pos + chunk));
    end = end == std::string::npos ? text.size() : std::min(text.size(), end + 1);
    docs.emplace_back(text.data() + pos, end - pos);
    pos = end;
  }
  // CPU time of this thread is the measure (the machine may be shared); wall time is shown too.
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  double best_cpu = 1e30, best_wall = 1e30;
  size_t n_ids = 0;
  std::vector<int32_t> ids;
  for (int r = 0; r < std::max(1, repeat); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = cpu_now();
    n_ids = 0;
    for (std::string_view d : docs) {
      ids.clear();
      tok.encode(d, false, &ids);
      n_ids += ids.size();
    }
    best_cpu = std::min(best_cpu, cpu_now() - c0);
    best_wall = std::min(
        best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double mb = double(text.size()) / 1e6;
  std::printf(
      "strata: %.2f MB in %zu documents, %zu tokens, cpu %.3f s, %.2f MB/s "
      "(wall %.3f s, %.2f MB/s)\n",
      mb, docs.size(), n_ids, best_cpu, mb / best_cpu, best_wall, mb / best_wall);
  return 0;
}

const bool kTokenize = strata::cli::register_command(
    {"tokenize", "encode JSON strings (one per line) to id arrays", run_tokenize});
const bool kDetokenize = strata::cli::register_command(
    {"detokenize", "decode id arrays (one per line) to JSON strings", run_detokenize});
const bool kBench = strata::cli::register_command(
    {"bench-tokenizer", "measure single-threaded encode speed", run_bench});

}  // namespace
