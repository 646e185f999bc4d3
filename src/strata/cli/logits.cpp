// strata logits: float32 logits for every position of a token sequence, as .npy.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/cli/engine_options.h"
#include "strata/engine/single_sequence.h"
#include "strata/io/npy.h"
#include "strata/models/parallel_model.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"Write float32 logits [T, vocab] for every position of --ids as a .npy file", "strata logits"};
  std::string model_dir, ids_text, out, mode = "full", device = "cpu", load_format = "auto";
  app.add_option("--model", model_dir, "checkpoint folder (default: the bundled model)");
  app.add_option("--ids", ids_text, "comma-separated token ids")->required();
  app.add_option("--out", out, "output .npy path")->required();
  app.add_option("--mode", mode, "full (default) | stepwise | chunked:N");
  app.add_option("--device", device, "cpu | cuda (default cpu)");
  add_load_format_option(app, load_format);
  int tensor_parallel_size = 1;
  bool expert_parallel = false;
  add_parallel_options(app, tensor_parallel_size, expert_parallel);
  CLI11_PARSE(app, argc, argv);
  const std::vector<int32_t> ids = parse_ids(ids_text, "--ids");
  check_parallel_options(tensor_parallel_size, expert_parallel, device);
  const Device dev = parse_device(device);
  auto model = load_parallel_model(model_dir_or_default(model_dir), LoadOptions{dev, parse_load_format(load_format), {}},
                                   {tensor_parallel_size, expert_parallel});
  Tensor logits = sequence_logits(*model, ids, mode);  // on the host whatever the device
  write_npy(out, logits);
  std::fprintf(stderr, "wrote %s: [%zu, %lld] (%s)\n", out.c_str(), ids.size(),
               (long long)model->info().vocab_size, mode.c_str());
  return 0;
}

const bool kRegistered = register_command({"logits", "write logits for every position as .npy", run});

}  // namespace
}  // namespace strata::cli
