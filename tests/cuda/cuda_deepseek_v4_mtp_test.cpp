// DeepSeek-V4's multi-token-prediction head on CUDA against the CPU, on the synthetic checkpoint
// of the CPU MTP tests (2 streams, ratio-4 and ratio-128 layers, hash routing): the target's
// logits and the residual streams it hands the head (forward_with_hidden), then the head's logits
// on the same streams (mtp_forward; position 0 carries no token embedding on either device), in
// the bf16 bounds of the golden tests.
#include <cstdio>
#include <memory>
#include <string>

#include "../engine/speculation_test_util.h"
#include "../unit/deepseek_v4_test_util.h"
#include "cuda_test_util.h"
#include "strata/models/model.h"

namespace strata::testing {
namespace {

// rms and largest error in units of max(1, std(ref)), as tests/cuda/cuda_golden_test.cpp bounds them.
void expect_near(const Tensor& got, const Tensor& ref, const std::string& what) {
  const Tensor g = to_host_f32(got), r = ref.to_f32();
  const Tensor g2 = g.reshape({g.dim(0), g.numel() / g.dim(0)}), r2 = r.reshape({r.dim(0), r.numel() / r.dim(0)});
  const ErrorProfile e = error_profile(g2, r2);
  const double scale = reference_scale(r2);
  std::printf("  cuda deepseek_v4 mtp %-28s max|d| %.4g, rms %.4g (scale %.4g)\n", what.c_str(), e.max, e.rms, scale);
  EXPECT_LE(e.rms, 0.12 * scale) << what;
  EXPECT_LE(e.max, 3.0 * scale) << what;
}

TEST(CudaDeepseekV4Mtp, TargetStreamsAndHeadFollowTheCpu) {
  STRATA_REQUIRE_GPU();
  using namespace strata::dsv4_testing;
  TempDir dir;
  TensorMap w = published_weights(21);
  add_mtp_weights(w, 22);
  write_checkpoint(dir, w, config_json_with_mtp());
  LoadOptions cpu_opts, gpu_opts;
  cpu_opts.mtp = gpu_opts.mtp = true;
  gpu_opts.device = Device::kCuda;
  const std::unique_ptr<Model> cpu = load_model(dir.dir(), cpu_opts), gpu = load_model(dir.dir(), gpu_opts);
  // 140 tokens: ratio-128 and ratio-4 entries close inside the prompt.
  const std::vector<int32_t> ids = prompt(140, 5);
  const ForwardBatch b = one_sequence_batch(ids);
  Caches cc = cpu->allocate_caches(1, 256, 1, true), gc = gpu->allocate_caches(1, 256, 1, true);
  Tensor cl, ch, gl, gh;
  cpu->forward_with_hidden(b, cc, cl, ch);
  gpu->forward_with_hidden(b, gc, gl, gh);
  expect_near(gl, cl, "target logits");
  expect_near(gh, ch, "target streams");
  // The head at the same positions, fed the next tokens and the CPU's streams on both devices.
  ForwardBatch h = b;
  for (size_t i = 0; i + 1 < ids.size(); ++i) h.token_ids[i] = ids[i + 1];
  h.token_ids.back() = ids.front();
  Tensor hl, hh, ghl, ghh;
  cpu->mtp_forward_with_hidden(h, ch, cc, hl, hh);
  gpu->mtp_forward_with_hidden(h, ch.to(Device::kCuda), gc, ghl, ghh);
  expect_near(ghl, hl, "head logits");
  expect_near(ghh, hh, "head streams");
}

}  // namespace
}  // namespace strata::testing
