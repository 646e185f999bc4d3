// `strata bench serve`: the load generator for an OpenAI-compatible server (bench_serve.cpp).
#pragma once

namespace strata::cli {

// argv[0] is "serve" (the word after `strata bench`); returns the process exit code.
int run_bench_serve(int argc, char** argv);

}  // namespace strata::cli
