// Checkpoint folders: single file, several files, sharded with an index, and the errors that
// name the index, the shard and the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/config.h"

using namespace strata;
namespace fs = std::filesystem;

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

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value + float(i);
  return t;
}

template <class Fn>
void expect_error(Fn fn, const std::string& origin, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no Error; expected one mentioning " << ::testing::PrintToString(parts);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(origin, 0), 0u) << "message does not start with " << origin << ": "
                                         << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " | " << msg;
  }
}

const char kConfig[] = R"({"architectures": ["TinyForCausalLM"], "hidden_size": 4})";

// DIR with config.json, two shards and an index mapping a.* to shard 1 and b.* to shard 2.
void write_sharded(const TempDir& tmp) {
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("model-00001-of-00002.safetensors"),
                    {{"a.weight", filled({2, 2}, 1)}, {"a.bias", filled({2}, 10)}});
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), {{"b.weight", filled({3}, 20)}});
  write_text(tmp.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 36},
    "weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "a.bias": "model-00001-of-00002.safetensors",
      "b.weight": "model-00002-of-00002.safetensors"
    }
  })");
}

}  // namespace

TEST(CheckpointTest, SingleFile) {
  TempDir tmp;
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("model.safetensors"),
                    {{"w", filled({2, 3}, 0.5f)}, {"v", filled({4}, -1)}});
  Checkpoint ck = Checkpoint::open(tmp.dir());
  EXPECT_EQ(ck.dir(), tmp.dir());
  EXPECT_EQ(ck.config_path(), tmp.file("config.json"));
  EXPECT_EQ(ck.config().at("hidden_size"), 4);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"v", "w"}));
  EXPECT_TRUE(ck.has("w"));
  EXPECT_FALSE(ck.has("x"));
  EXPECT_EQ(ck.info("w").shape, (Shape{2, 3}));
  EXPECT_EQ(ck.file_of("w"), tmp.file("model.safetensors"));
  Tensor w = ck.get("w");
  EXPECT_EQ(w.data<float>()[5], 5.5f);
  EXPECT_EQ(ck.files().size(), 1u);
}

TEST(CheckpointTest, MissingTensorNamesTheFolder) {
  TempDir tmp;
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("model.safetensors"), {{"w", filled({1}, 0)}});
  Checkpoint ck = Checkpoint::open(tmp.dir());
  std::string want = tmp.dir() + ": missing tensor 'lm_head.weight'";
  expect_error([&] { ck.get("lm_head.weight"); }, want, {});
  expect_error([&] { ck.info("lm_head.weight"); }, want, {});
  expect_error([&] { ck.file_of("lm_head.weight"); }, want, {});
}

TEST(CheckpointTest, TensorsOutliveTheCheckpoint) {
  TempDir tmp;
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("model.safetensors"), {{"w", filled({8}, 3)}});
  Tensor w;
  { w = Checkpoint::open(tmp.dir()).get("w"); }
  EXPECT_EQ(w.data<float>()[7], 10.0f);
}

TEST(CheckpointTest, SeveralFilesWithoutIndex) {
  TempDir tmp;
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("one.safetensors"), {{"a", filled({1}, 1)}});
  write_safetensors(tmp.file("two.safetensors"), {{"b", filled({1}, 2)}});
  write_text(tmp.file("notes.txt"), "not a tensor file");
  Checkpoint ck = Checkpoint::open(tmp.dir());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.file_of("b"), tmp.file("two.safetensors"));
  EXPECT_EQ(ck.get("b").data<float>()[0], 2.0f);
}

TEST(CheckpointTest, SameTensorInTwoFilesWithoutIndex) {
  TempDir tmp;
  write_text(tmp.file("config.json"), kConfig);
  write_safetensors(tmp.file("one.safetensors"), {{"a", filled({1}, 1)}});
  write_safetensors(tmp.file("two.safetensors"), {{"a", filled({1}, 2)}});
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.dir(),
               {"tensor 'a'", "one.safetensors", "two.safetensors"});
}

TEST(CheckpointTest, ShardedWithIndex) {
  TempDir tmp;
  write_sharded(tmp);
  // A stray consolidated file (as in Mistral repos) is ignored: the index is authoritative.
  write_safetensors(tmp.file("consolidated.safetensors"), {{"a.weight", filled({1}, 99)}});
  Checkpoint ck = Checkpoint::open(tmp.dir());
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a.bias", "a.weight", "b.weight"}));
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.file_of("a.bias"), tmp.file("model-00001-of-00002.safetensors"));
  EXPECT_EQ(ck.file_of("b.weight"), tmp.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck.get("a.weight").data<float>()[3], 4.0f);
  EXPECT_EQ(ck.get("b.weight").data<float>()[2], 22.0f);
  EXPECT_EQ(ck.info("a.bias").dtype, DType::kF32);
}

TEST(CheckpointTest, IndexPointsAtMissingShard) {
  TempDir tmp;
  write_sharded(tmp);
  fs::remove(tmp.file("model-00002-of-00002.safetensors"));
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.file("model.safetensors.index.json"),
               {"model-00002-of-00002.safetensors", "tensor 'b.weight'", "does not exist"});
}

TEST(CheckpointTest, IndexNamesTensorTheShardLacks) {
  TempDir tmp;
  write_sharded(tmp);
  write_text(tmp.file("model.safetensors.index.json"), R"({"weight_map": {
      "a.weight": "model-00001-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.file("model.safetensors.index.json"),
               {"tensor 'b.weight'", "model-00001-of-00002.safetensors", "does not contain it"});
}

TEST(CheckpointTest, MalformedIndex) {
  TempDir tmp;
  write_sharded(tmp);
  std::string index = tmp.file("model.safetensors.index.json");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"([1])", {"expected a JSON object, got array"}},
      {R"({"metadata": {}})", {"missing 'weight_map'"}},
      {R"({"weight_map": ["a"]})", {"'weight_map' must be an object, got array"}},
      {R"({"weight_map": {"a.weight": 3}})", {"weight_map['a.weight']", "got integer"}},
      {R"({"weight_map": {"a.weight": "../model-00001-of-00002.safetensors"}})",
       {"weight_map['a.weight']", "relative path inside"}},
      {R"({"weight_map": {"a.weight": "/etc/passwd"}})", {"weight_map['a.weight']", "/etc/passwd"}},
      {R"({"weight_map": {"a.weight": ""}})", {"weight_map['a.weight']"}},
      {R"({"weight_map": {"a.weight": "x", "a.weight": "y"}})",
       {"duplicate key 'a.weight' in 'weight_map'"}},
      {R"({"weight_map": {)", {"invalid JSON"}},
  };
  for (const auto& [text, parts] : cases) {
    SCOPED_TRACE(text);
    write_text(index, text);
    expect_error([&] { Checkpoint::open(tmp.dir()); }, index, parts);
  }
}

TEST(CheckpointTest, CorruptShardNamesTheShard) {
  TempDir tmp;
  write_sharded(tmp);
  write_text(tmp.file("model-00002-of-00002.safetensors"), "garbage!garbage!");
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.file("model-00002-of-00002.safetensors"),
               {"header length"});
}

TEST(CheckpointTest, FolderProblems) {
  TempDir tmp;
  expect_error([&] { Checkpoint::open(tmp.file("nope")); }, tmp.file("nope"), {"not a directory"});
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.file("config.json"), {"cannot open"});
  write_text(tmp.file("config.json"), "{\"a\": }");
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.file("config.json"), {"invalid JSON"});
  write_text(tmp.file("config.json"), kConfig);
  expect_error([&] { Checkpoint::open(tmp.dir()); }, tmp.dir(),
               {"no model.safetensors.index.json and no *.safetensors files"});
}

TEST(CheckpointTest, ReadsHuggingFaceShardedFixture) {
  std::string dir = STRATA_SOURCE_DIR "/tests/fixtures/qwen3_5_moe_tiny";
  if (!fs::exists(dir + "/model.safetensors.index.json")) GTEST_SKIP() << "no fixture " << dir;
  Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.names().size(), 96u);
  EXPECT_TRUE(ck.has("lm_head.weight"));
  EXPECT_EQ(ck.get("lm_head.weight").dtype(), DType::kBF16);
  ConfigView text = ConfigView::text_config(ck.config(), ck.config_path());
  EXPECT_EQ(text.get_int("hidden_size"), 64);
  EXPECT_EQ(ck.get("lm_head.weight").shape(), (Shape{448, text.get_int("hidden_size")}));
}
