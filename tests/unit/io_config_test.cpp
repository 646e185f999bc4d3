// config.json: reading, strict parsing, and ConfigView's typed getters and their messages.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/io/config.h"

using namespace strata;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("strata-io-") + (info ? info->name() : "x") + "-" +
                       std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
    path_ = fs::temp_directory_path() / name;
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string dir() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char kOrigin[] = "/m/config.json";

// A multimodal wrapper config in the shape of Qwen3_5ForConditionalGeneration's.
const Json kWrapper = Json::parse(R"({
  "architectures": ["Qwen3_5ForConditionalGeneration"],
  "tie_word_embeddings": false,
  "text_config": {
    "hidden_size": 2048,
    "intermediate_size": 6144.0,
    "num_layers_float": 1.5,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000000,
    "as_string": "2048",
    "as_bool": true,
    "pad_token_id": null,
    "huge": 18446744073709551615,
    "big_float": 1e300,
    "negative": -3,
    "eos_token_id": [1, 2],
    "bos_token_id": 7,
    "layer_types": ["linear_attention", "full_attention"],
    "mixed_types": ["a", 3],
    "mrope_section": [11, 11, 10],
    "bad_ints": [1, true],
    "factors": [1, 0.5],
    "model_type": "qwen3_5_text",
    "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}
  }
})");

}  // namespace

TEST(ConfigTest, TextConfigPicksTheNestedObject) {
  ConfigView text = ConfigView::text_config(kWrapper, kOrigin);
  EXPECT_EQ(text.prefix(), "text_config.");
  EXPECT_EQ(text.origin(), kOrigin);
  EXPECT_EQ(text.get_int("hidden_size"), 2048);
  Json flat = {{"hidden_size", 64}};
  ConfigView top = ConfigView::text_config(flat, kOrigin);
  EXPECT_EQ(top.prefix(), "");
  EXPECT_EQ(top.get_int("hidden_size"), 64);
  EXPECT_EQ(error_of([&] { ConfigView::text_config(Json{{"text_config", 3}}, kOrigin); }),
            "/m/config.json: field 'text_config': expected object, got integer");
  EXPECT_EQ(error_of([&] { ConfigView::text_config(Json::array({1}), kOrigin); }),
            "/m/config.json: expected a JSON object at the top level, got array");
  // null text_config counts as absent.
  Json null_text = {{"text_config", nullptr}, {"hidden_size", 8}};
  EXPECT_EQ(ConfigView::text_config(null_text, kOrigin).get_int("hidden_size"), 8);
}

TEST(ConfigTest, Integers) {
  ConfigView c = ConfigView::text_config(kWrapper, kOrigin);
  EXPECT_EQ(c.get_int("intermediate_size"), 6144);  // integral float accepted
  EXPECT_EQ(c.get_int("negative"), -3);
  EXPECT_EQ(c.get_int("absent", 5), 5);
  EXPECT_EQ(c.get_int("pad_token_id", -1), -1);  // null: the fallback
  EXPECT_EQ(error_of([&] { c.get_int("as_string"); }),
            "/m/config.json: field 'text_config.as_string': expected integer, got string");
  EXPECT_EQ(error_of([&] { c.get_int("as_bool"); }),
            "/m/config.json: field 'text_config.as_bool': expected integer, got boolean");
  EXPECT_EQ(error_of([&] { c.get_int("num_layers_float"); }),
            "/m/config.json: field 'text_config.num_layers_float': expected integer, got "
            "non-integer number 1.5");
  EXPECT_NE(error_of([&] { c.get_int("huge"); }).find("'text_config.huge': integer "
                                                      "18446744073709551615 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.get_int("big_float"); }).find("'text_config.big_float'"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { c.get_int("absent"); }),
            "/m/config.json: field 'text_config.absent': missing");
  EXPECT_EQ(error_of([&] { c.get_int("pad_token_id"); }),
            "/m/config.json: field 'text_config.pad_token_id': is null");
  // A fallback does not excuse a wrong type.
  EXPECT_NE(error_of([&] { c.get_int("as_string", 1); }).find("expected integer, got string"),
            std::string::npos);
}

TEST(ConfigTest, FloatsBoolsStrings) {
  ConfigView c = ConfigView::text_config(kWrapper, kOrigin);
  EXPECT_DOUBLE_EQ(c.get_float("rms_norm_eps"), 1e-6);
  EXPECT_DOUBLE_EQ(c.get_float("rope_theta"), 1e7);  // integers are numbers
  EXPECT_DOUBLE_EQ(c.get_float("absent", 0.5), 0.5);
  EXPECT_EQ(error_of([&] { c.get_float("as_bool"); }),
            "/m/config.json: field 'text_config.as_bool': expected number, got boolean");
  EXPECT_TRUE(c.get_bool("as_bool"));
  EXPECT_TRUE(c.get_bool("absent", true));
  EXPECT_EQ(error_of([&] { c.get_bool("hidden_size", false); }),
            "/m/config.json: field 'text_config.hidden_size': expected boolean, got integer");
  EXPECT_EQ(c.get_string("model_type"), "qwen3_5_text");
  EXPECT_EQ(c.get_string("absent", "x"), "x");
  EXPECT_EQ(error_of([&] { c.get_string("hidden_size"); }),
            "/m/config.json: field 'text_config.hidden_size': expected string, got integer");
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("pad_token_id"));
  EXPECT_FALSE(c.has("absent"));
}

TEST(ConfigTest, Lists) {
  ConfigView c = ConfigView::text_config(kWrapper, kOrigin);
  EXPECT_EQ(c.get_int_list("mrope_section"), (std::vector<int64_t>{11, 11, 10}));
  EXPECT_EQ(c.get_string_list("layer_types"),
            (std::vector<std::string>{"linear_attention", "full_attention"}));
  EXPECT_EQ(c.get_float_list("factors"), (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(error_of([&] { c.get_int_list("bad_ints"); }),
            "/m/config.json: field 'text_config.bad_ints[1]': expected integer, got boolean");
  EXPECT_EQ(error_of([&] { c.get_string_list("mixed_types"); }),
            "/m/config.json: field 'text_config.mixed_types[1]': expected string, got integer");
  EXPECT_EQ(error_of([&] { c.get_int_list("hidden_size"); }),
            "/m/config.json: field 'text_config.hidden_size': expected list of integers, got "
            "integer");
  EXPECT_EQ(c.get_int_or_list("eos_token_id"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c.get_int_or_list("bos_token_id"), (std::vector<int64_t>{7}));
  EXPECT_TRUE(c.get_int_or_list("absent").empty());
  EXPECT_TRUE(c.get_int_or_list("pad_token_id").empty());
  EXPECT_EQ(error_of([&] { c.get_int_or_list("model_type"); }),
            "/m/config.json: field 'text_config.model_type': expected integer or list of "
            "integers, got string");
}

TEST(ConfigTest, ChildObjects) {
  ConfigView c = ConfigView::text_config(kWrapper, kOrigin);
  ConfigView rope = c.child("rope_parameters");
  EXPECT_EQ(rope.prefix(), "text_config.rope_parameters.");
  EXPECT_DOUBLE_EQ(rope.get_float("partial_rotary_factor"), 0.25);
  EXPECT_EQ(error_of([&] { rope.get_int("rope_type"); }),
            "/m/config.json: field 'text_config.rope_parameters.rope_type': expected integer, "
            "got string");
  EXPECT_EQ(error_of([&] { c.child("layer_types"); }),
            "/m/config.json: field 'text_config.layer_types': expected object, got array");
  EXPECT_EQ(error_of([&] { c.child("absent"); }),
            "/m/config.json: field 'text_config.absent': missing");
  EXPECT_EQ(error_of([&] { c.fail_field("x", "custom"); }),
            "/m/config.json: field 'text_config.x': custom");
  Json number = 3;
  EXPECT_EQ(error_of([&] { ConfigView(&number, kOrigin, "a.b."); }),
            "/m/config.json: field 'a.b': expected object, got integer");
}

TEST(ConfigTest, ReadJsonFile) {
  TempDir tmp;
  std::string path = tmp.file("config.json");
  write_text(path, R"({"hidden_size": 64, "text_config": {"x": [1, 2]}})");
  Json j = read_json_file(path);
  EXPECT_EQ(j.at("hidden_size"), 64);

  std::string missing = tmp.file("missing.json");
  std::string msg = error_of([&] { read_json_file(missing); });
  EXPECT_EQ(msg.rfind(missing + ": cannot open", 0), 0u) << msg;
  msg = error_of([&] { read_json_file(tmp.dir()); });
  EXPECT_EQ(msg.rfind(tmp.dir() + ": is a directory", 0), 0u) << msg;

  write_text(path, "{\n  \"a\": 1,\n  \"b\": tru\n}\n");
  msg = error_of([&] { read_json_file(path); });
  EXPECT_EQ(msg.rfind(path + ": invalid JSON", 0), 0u) << msg;
  EXPECT_NE(msg.find("parse error at line "), std::string::npos) << msg;
  EXPECT_NE(msg.find("(byte "), std::string::npos) << msg;

  write_text(path, "");
  msg = error_of([&] { read_json_file(path); });
  EXPECT_EQ(msg.rfind(path + ": invalid JSON", 0), 0u) << msg;
}

TEST(ConfigTest, DuplicateKeys) {
  const std::string text = R"({"a": 1, "text_config": {"hidden_size": 1, "hidden_size": 2}})";
  EXPECT_EQ(error_of([&] { parse_json(text, "c.json"); }),
            "c.json: duplicate key 'hidden_size' in 'text_config'");
  EXPECT_EQ(parse_json(text, "c.json", DuplicateKeys::kKeepLast)["text_config"]["hidden_size"],
            2);
  EXPECT_EQ(error_of([&] { parse_json(R"({"a": 1, "a": 2})", "c.json"); }),
            "c.json: duplicate key 'a' at the top level");
  // Paths through arrays name the element.
  EXPECT_EQ(error_of([&] { parse_json(R"({"l": [{}, {"k": 1, "k": 1}]})", "c.json"); }),
            "c.json: duplicate key 'k' in 'l[1]'");
  // The same key in sibling objects is fine.
  EXPECT_NO_THROW(parse_json(R"({"x": {"k": 1}, "y": {"k": 2}, "z": [{"k": 1}, {"k": 2}]})",
                             "c.json"));
}

TEST(ConfigTest, ParseJsonErrorsAreStrataErrors) {
  for (std::string_view bad : {std::string_view("{}\0{}", 5), std::string_view("\0", 1)}) {
    EXPECT_EQ(error_of([&] { parse_json(bad, "x.json"); }), "x.json: invalid JSON: NUL byte at byte " +
              std::to_string(bad.find('\0')));
  }
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "1e999", "\"\xff\"", "{} {}", "nul"}) {
    SCOPED_TRACE(bad);
    std::string msg = error_of([&] { parse_json(bad, "x.json"); });
    EXPECT_EQ(msg.rfind("x.json: invalid JSON", 0), 0u) << msg;
  }
  EXPECT_EQ(parse_json("  [1, 2.5, null]  ", "x.json").size(), 3u);
  EXPECT_EQ(json_type_name(Json(1.5)), "number");
  EXPECT_EQ(json_type_name(Json(3u)), "integer");
  EXPECT_EQ(json_type_name(Json(nullptr)), "null");
}
