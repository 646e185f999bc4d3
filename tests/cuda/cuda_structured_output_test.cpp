// Structured outputs are refused on CUDA (docs/GRAMMAR.md): the engine names the device when a
// request asks for one, and the sampler refuses a mask row on device logits.
#include <gtest/gtest.h>

#include "../engine/engine_test_util.h"
#include "cuda_test_util.h"
#include "strata/engine/structured_output.h"
#include "strata/ops/ops.h"

namespace strata::testing {
namespace {

TEST(CudaStructuredOutput, EngineAndSamplerRefuseIt) {
  STRATA_REQUIRE_GPU();
  const std::string fixture = "qwen3_5_tiny";
  auto model = std::shared_ptr<Model>(load_model(engine_fixture_dir(fixture), Device::kCuda));
  Engine engine(model, test_config(fixture), GenerationDefaults::load(engine_fixture_dir(fixture)));
  const int64_t vocab = model->info().vocab_size;
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) bytes[size_t(i)] = std::string(1, char('a' + i % 26));
  SamplingParams p;
  p.structured = StructuredOutput::make(
      grammar::from_regex("[a-z]+"), std::make_shared<grammar::TokenVocabulary>(std::move(bytes), std::vector<int32_t>{}));
  try {
    engine.add_request("r", {5, 6, 7}, p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
  Tensor logits = Tensor::zeros({1, vocab}, DType::kF32).to(Device::kCuda);
  ops::SampleBatch b;
  ops::SampleSpec s;
  s.allow_row = 0;
  b.rows.push_back(s);
  b.allow_words = (vocab + 63) / 64;
  b.allow.assign(size_t(b.allow_words), ~uint64_t(0));
  ops::SampledTokens out;
  EXPECT_THROW(ops::sample_tokens(logits, b, out), Error);
}

}  // namespace
}  // namespace strata::testing
