// strata quantize: a quantised copy of a Qwen3.5-family checkpoint, in the published FP8
// block-scale (Qwen's -FP8) or NVFP4 (NVIDIA ModelOpt) layout (io/quantise_checkpoint.h). For
// measuring what a format costs (`strata perplexity` on both folders); strata dequantises such
// weights at load.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/io/quantise_checkpoint.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"Write a quantised copy of a Qwen3.5-family checkpoint: fp8 (128 x 128 block-scale e4m3, as "
               "Qwen's -FP8 checkpoints) or nvfp4 (NVIDIA ModelOpt); routers, in_proj_a/b, embeddings and "
               "norms stay bf16",
               "strata quantize"};
  std::string model_dir, out, format;
  app.add_option("--model", model_dir, "checkpoint folder (default: the bundled model)");
  app.add_option("--out", out, "new folder for the quantised checkpoint")->required();
  app.add_option("--format", format, "fp8 | nvfp4 | mxfp4")->required();
  CLI11_PARSE(app, argc, argv);
  const CheckpointQuant q = parse_checkpoint_quant(format, "--format");
  const std::string dir = model_dir_or_default(model_dir);
  const QuantiseSummary s = quantise_checkpoint(dir, out, q);
  std::printf("wrote %s: %lld tensors quantised (%s), %lld kept; %.2f MB -> %.2f MB\n", out.c_str(),
              (long long)s.quantised, format.c_str(), (long long)s.kept, double(s.bytes_in) / 1e6,
              double(s.bytes_out) / 1e6);
  return 0;
}

const bool kRegistered = register_command({"quantize", "write an fp8 or nvfp4 copy of a checkpoint", run});

}  // namespace
}  // namespace strata::cli
