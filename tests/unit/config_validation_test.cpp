// Bad config.json values are refused at load with a strata::Error naming config.json and the
// field (issue 20): zero head counts used to crash with SIGFPE, rope_theta 0 and a negative
// rms_norm_eps gave NaN logits, an eos id outside the vocabulary was accepted, a bad
// num_experts_per_tok failed at run time and a negative hidden_size read as a tensor shape
// mismatch. Each case edits a fixture's config.json in a temporary folder (its weights linked
// in) and loads it as a user would.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/io/config.h"
#include "strata/models/model.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using Json = nlohmann::json;
using Edit = std::function<void(Json& text)>;  // edits the language-model part of config.json

std::string fixture_dir(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/tests/fixtures/" + name;
}

// A folder holding the fixture's config.json after `edit` (applied to text_config when there is
// one, else to the top level) and links to its other files.
class EditedCheckpoint {
 public:
  EditedCheckpoint(const std::string& fixture, const Edit& edit) {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("strata_config_" + std::to_string(rd()));
    fs::create_directories(dir_);
    for (const auto& entry : fs::directory_iterator(fixture_dir(fixture))) {
      if (entry.path().filename() != "config.json") {
        fs::create_symlink(entry.path(), dir_ / entry.path().filename());
      }
    }
    Json cfg = read_json_file(fixture_dir(fixture) + "/config.json");
    edit(cfg.contains("text_config") ? cfg["text_config"] : cfg);
    std::ofstream(dir_ / "config.json") << cfg.dump(1);
  }
  ~EditedCheckpoint() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

// Loads `fixture` with `edit` applied; expects a strata::Error naming DIR/config.json and each
// of `needles`.
void expect_rejected(const std::string& fixture, const Edit& edit, const std::vector<std::string>& needles) {
  const EditedCheckpoint ckpt(fixture, edit);
  std::string err;
  try {
    load_model(ckpt.dir());
    ADD_FAILURE() << fixture << ": loaded without an error";
    return;
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find(ckpt.dir() + "/config.json"), std::string::npos) << fixture << ": " << err;
  for (const std::string& n : needles) EXPECT_NE(err.find(n), std::string::npos) << fixture << ": " << err;
}

Edit set(const std::string& key, Json value) {
  return [key, value](Json& t) { t[key] = value; };
}
Edit set_rope_theta(Json value) {
  return [value](Json& t) { t["rope_parameters"]["rope_theta"] = value; };
}

const std::vector<std::string> kQwen = {"qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny", "qwen4_exp_tiny",
                                        "qwen4_exp_vl_tiny"};
const std::vector<std::string> kMoe = {"qwen3_next_tiny", "qwen3_5_moe_tiny", "qwen4_exp_tiny",
                                       "qwen4_exp_vl_tiny", "deepseek_v4_tiny"};
const std::vector<std::string> kAll = {"qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny", "qwen4_exp_tiny",
                                       "qwen4_exp_vl_tiny", "deepseek_v4_tiny"};

// Once crashed with SIGFPE (a division by the head count).
TEST(ConfigValidation, ZeroHeadCountsAreRefused) {
  for (const std::string& f : kQwen) {
    for (const char* key : {"num_attention_heads", "num_key_value_heads", "linear_num_key_heads"}) {
      SCOPED_TRACE(key);
      expect_rejected(f, set(key, 0), {key, "must be positive (got 0)"});
    }
  }
  expect_rejected("deepseek_v4_tiny", set("num_attention_heads", 0), {"num_attention_heads", "(got 0)"});
}

// qwen3_5_moe_tiny and qwen4_exp_vl_tiny nest the language model in text_config.
TEST(ConfigValidation, ZeroHeadCountInTextConfigNamesTheNestedField) {
  for (const char* f : {"qwen3_5_moe_tiny", "qwen4_exp_vl_tiny"}) {
    expect_rejected(f, set("num_key_value_heads", 0), {"'text_config.num_key_value_heads'", "(got 0)"});
    expect_rejected(f, set("linear_num_key_heads", 0), {"'text_config.linear_num_key_heads'"});
  }
}

TEST(ConfigValidation, HeadCountsMustDivide) {
  for (const std::string& f : kQwen) {
    expect_rejected(f, set("num_key_value_heads", 3), {"num_attention_heads", "num_key_value_heads"});
    expect_rejected(f, set("linear_num_key_heads", 5), {"linear_num_value_heads", "linear_num_key_heads"});
  }
}

// Once gave NaN logits.
TEST(ConfigValidation, RopeThetaMustBePositive) {
  for (const std::string& f : kQwen) {
    expect_rejected(f, set_rope_theta(0), {"rope_parameters.rope_theta", "> 0"});
    expect_rejected(f, set_rope_theta(-5.0), {"rope_theta"});
    // The flat spelling, read when rope_parameters has no rope_theta.
    const bool nested = read_json_file(fixture_dir(f) + "/config.json").contains("text_config");
    expect_rejected(f, [](Json& t) { t["rope_parameters"].erase("rope_theta"); t["rope_theta"] = 0; },
                    {std::string("field '") + (nested ? "text_config." : "") + "rope_theta'"});
  }
  expect_rejected("deepseek_v4_tiny", set("rope_theta", 0), {"rope_theta"});
  expect_rejected("deepseek_v4_tiny", set("compress_rope_theta", -1.0), {"compress_rope_theta"});
}

// Once gave NaN logits.
TEST(ConfigValidation, RmsNormEpsMustBePositive) {
  for (const std::string& f : kAll) {
    expect_rejected(f, set("rms_norm_eps", -1), {"rms_norm_eps", "> 0"});
    expect_rejected(f, set("rms_norm_eps", 0.0), {"rms_norm_eps"});
  }
  expect_rejected("deepseek_v4_tiny", set("hc_eps", 0.0), {"hc_eps"});
}

// Once accepted.
TEST(ConfigValidation, TokenIdsMustLieInTheVocabulary) {
  for (const std::string& f : kAll) {
    expect_rejected(f, set("eos_token_id", 100000), {"eos_token_id", "outside the vocabulary"});
    expect_rejected(f, set("eos_token_id", Json::array({2, -1})), {"eos_token_id", "-1"});
    expect_rejected(f, set("bos_token_id", 100000), {"bos_token_id", "outside the vocabulary"});
  }
  // A vocab_size-th id is one past the end.
  expect_rejected("qwen3_5_tiny", set("eos_token_id", 384), {"eos_token_id", "384"});
}

// Once failed at run time without naming config.json.
TEST(ConfigValidation, ExpertsPerTokenMustLieWithinTheExperts) {
  for (const std::string& f : kMoe) {
    for (int top_k : {0, 1000, -1}) {
      SCOPED_TRACE(top_k);
      expect_rejected(f, set("num_experts_per_tok", top_k),
                      {"num_experts_per_tok", "(got " + std::to_string(top_k) + ")"});
    }
  }
}

// Once reported as a tensor shape mismatch.
TEST(ConfigValidation, NegativeSizesAreRefused) {
  for (const std::string& f : kAll) {
    expect_rejected(f, set("hidden_size", -64), {"hidden_size", "must be positive (got -64)"});
    expect_rejected(f, set("vocab_size", 0), {"vocab_size"});
    expect_rejected(f, set("num_hidden_layers", -1), {"num_hidden_layers"});
    expect_rejected(f, set("head_dim", 0), {"head_dim"});
    expect_rejected(f, set("max_position_embeddings", 0), {"max_position_embeddings"});
  }
  for (const std::string& f : kQwen) {
    for (const char* key : {"linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                            "linear_conv_kernel_dim"}) {
      expect_rejected(f, set(key, -2), {key, "(got -2)"});
    }
  }
}

// One family-specific field each.
TEST(ConfigValidation, FamilySpecificFields) {
  // qwen3_next: decoder_sparse_step is a modulus (SIGFPE at 0).
  expect_rejected("qwen3_next_tiny", set("decoder_sparse_step", 0), {"decoder_sparse_step"});
  expect_rejected("qwen3_next_tiny", set("moe_intermediate_size", 0), {"moe_intermediate_size"});
  expect_rejected("qwen3_next_tiny", set("shared_expert_intermediate_size", -8), {"shared_expert_intermediate_size"});
  // qwen3_5: the dense MLP's width; full_attention_interval is a modulus (SIGFPE at 0).
  expect_rejected("qwen3_5_tiny", set("intermediate_size", 0), {"intermediate_size"});
  expect_rejected("qwen3_5_tiny", [](Json& t) { t.erase("layer_types"); t["full_attention_interval"] = 0; },
                  {"full_attention_interval"});
  // qwen3_5_moe: a negative expert count.
  expect_rejected("qwen3_5_moe_tiny", set("num_experts", -8), {"text_config.num_experts"});
  // deepseek_v4: routing and hyper-connection sizes.
  expect_rejected("deepseek_v4_tiny", set("n_routed_experts", 0), {"n_routed_experts"});
  expect_rejected("deepseek_v4_tiny", set("routed_scaling_factor", 0.0), {"routed_scaling_factor"});
  expect_rejected("deepseek_v4_tiny", set("num_hash_layers", -1), {"num_hash_layers"});
  // qwen4_exp: experts, shared expert and hyper-connection rank.
  expect_rejected("qwen4_exp_tiny", set("num_experts", 0), {"num_experts"});
  expect_rejected("qwen4_exp_tiny", set("shared_expert_intermediate_size", 0), {"shared_expert_intermediate_size"});
  expect_rejected("qwen4_exp_vl_tiny", set("hc_lowrank", 0), {"text_config.hc_lowrank"});
}

// The fixtures themselves still load (the checks refuse nothing valid).
TEST(ConfigValidation, FixturesStillLoad) {
  for (const char* f : {"qwen3_next_tiny", "qwen3_5_tiny", "qwen3_5_moe_tiny", "qwen4_exp_tiny",
                        "qwen4_exp_vl_tiny", "deepseek_v4_tiny", "deepseek_v4_quant", "deepseek_v4_topk_all"}) {
    const EditedCheckpoint ckpt(f, [](Json&) {});
    EXPECT_NO_THROW(load_model(ckpt.dir())) << f;
  }
}

}  // namespace
}  // namespace strata
