// Safetensors reading and writing: round trips for every dtype, and every malformed header an
// Error (never a crash) that names the file and the tensor or field at fault.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/io/safetensors.h"

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
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = fs::temp_directory_path() / name;
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header text and a data section.
std::string st_bytes(const std::string& header, const std::string& data = "") {
  return u64_le(header.size()) + header + data;
}

// A tensor whose bytes count 0, 1, 2, ... so that any misplaced byte shows.
Tensor patterned(Shape shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(seed + 7 * i);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// Asserts that `fn` throws strata::Error whose message starts with `origin` and contains
// every one of `parts`.
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

}  // namespace

TEST(SafetensorsTest, RoundTripsEveryDtype) {
  TempDir tmp;
  const std::vector<std::pair<DType, std::string>> dtypes = {
      {DType::kF32, "F32"},         {DType::kF16, "F16"},         {DType::kBF16, "BF16"},
      {DType::kF8E4M3, "F8_E4M3"},  {DType::kF8E5M2, "F8_E5M2"},  {DType::kU8, "U8"},
      {DType::kI8, "I8"},           {DType::kI32, "I32"},         {DType::kI64, "I64"},
      {DType::kUE8M0, "F8_E8M0"}};
  std::vector<std::pair<std::string, Tensor>> tensors;
  int seed = 1;
  for (const auto& [dtype, name] : dtypes) {
    tensors.emplace_back("t." + name, patterned({3, 5}, dtype, seed++));
  }
  tensors.emplace_back("scalar", patterned({}, DType::kF32, 99));
  tensors.emplace_back("empty", patterned({0, 4}, DType::kBF16, 0));
  std::string path = tmp.file("all.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "héllo"}});

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->header().data_offset % 8, 0u);  // the writer pads the header
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "héllo");
  ASSERT_EQ(f->header().tensors.size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    SCOPED_TRACE(name);
    const TensorInfo* info = f->find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, want.dtype());
    EXPECT_EQ(info->shape, want.shape());
    EXPECT_EQ(info->nbytes(), want.nbytes());
    EXPECT_EQ((f->header().data_offset + info->begin) % dtype_size(info->dtype), 0u);
    Tensor got = f->get(name);
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_EQ(got.device(), Device::kCpu);
    EXPECT_TRUE(same_bytes(got, want));
    if (want.nbytes() > 0) {
      EXPECT_EQ(got.raw(), f->get(name).raw());  // zero-copy views
    }
  }
  // The on-disk dtype strings are the safetensors spellings.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(bytes.find("\"F8_E8M0\""), std::string::npos);
  EXPECT_NE(bytes.find("\"F8_E4M3\""), std::string::npos);
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST(SafetensorsTest, WriterAlignsAndHeaderIsSortedByOffset) {
  TempDir tmp;
  std::string path = tmp.file("order.safetensors");
  write_safetensors(path, {{"z", patterned({2}, DType::kF32, 1)},
                           {"a", patterned({3}, DType::kF32, 2)},
                           {"m", patterned({1}, DType::kI64, 3)}});
  auto f = SafetensorsFile::open(path);
  const auto& t = f->header().tensors;
  ASSERT_EQ(t.size(), 3u);
  // Largest elements first, then the order given.
  EXPECT_EQ(t[0].name, "m");
  EXPECT_EQ(t[1].name, "z");
  EXPECT_EQ(t[2].name, "a");
  EXPECT_EQ(t[2].begin, 16u);
}

TEST(SafetensorsTest, ViewsOutliveTheFile) {
  TempDir tmp;
  std::string path = tmp.file("w.safetensors");
  Tensor want = patterned({4, 4}, DType::kBF16, 5);
  write_safetensors(path, {{"w", want}});
  Tensor got;
  {
    auto f = SafetensorsFile::open(path);
    got = f->get("w");
  }
  EXPECT_TRUE(same_bytes(got, want));
  EXPECT_EQ(got.to_f32().numel(), 16);
}

TEST(SafetensorsTest, MisalignedDataIsCopiedNotViewed) {
  TempDir tmp;
  // A 9-byte header puts the data section at offset 17: F32 data there is misaligned.
  float values[2] = {1.5f, -2.25f};
  std::string data(reinterpret_cast<const char*>(values), 8);
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string path = tmp.file("odd.safetensors");
  write_bytes(path, st_bytes(header, data));
  ASSERT_NE((8 + header.size()) % 4, 0u);
  auto f = SafetensorsFile::open(path);
  Tensor t = f->get("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.25f);
}

TEST(SafetensorsTest, AcceptsPaddingEmptyTensorsAndUnknownFields) {
  TempDir tmp;
  std::string path = tmp.file("ok.safetensors");
  // Trailing spaces (the reference writer's padding), an empty header, a zero-size tensor inside
  // another tensor's bytes (it holds none), and a field this reader does not use.
  write_bytes(path, st_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
                             R"("b":{"dtype":"I8","shape":[2],"data_offsets":[8,10],"x":1}})"
                             "     ",
                             std::string(10, '\x05')));
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->get("e").numel(), 0);
  EXPECT_EQ(f->get("b").data<int8_t>()[1], 5);
  write_bytes(path, st_bytes("{}"));
  EXPECT_TRUE(SafetensorsFile::open(path)->header().tensors.empty());
}

TEST(SafetensorsTest, ReadsHuggingFaceFixture) {
  std::string path = STRATA_SOURCE_DIR "/tests/fixtures/qwen3_5_tiny/model.safetensors";
  if (!fs::exists(path)) GTEST_SKIP() << "no fixture " << path;
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  Tensor emb = f->get("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype(), DType::kBF16);
  EXPECT_EQ(emb.shape(), (Shape{384, 64}));
  Tensor f32 = emb.to_f32();
  for (int64_t i = 0; i < f32.numel(); ++i) ASSERT_TRUE(std::isfinite(f32.data<float>()[i]));
}

TEST(SafetensorsTest, MissingTensorAndMissingFile) {
  TempDir tmp;
  std::string path = tmp.file("one.safetensors");
  write_safetensors(path, {{"w", patterned({2}, DType::kF32, 1)}});
  auto f = SafetensorsFile::open(path);
  expect_error([&] { f->get("nope"); }, path, {": missing tensor 'nope'"});
  std::string absent = tmp.file("absent.safetensors");
  expect_error([&] { SafetensorsFile::open(absent); }, absent, {"cannot open"});
  expect_error([&] { SafetensorsFile::open(tmp.file("")); }, tmp.file(""), {"not a regular file"});
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  TempDir tmp;
  std::string path = tmp.file("bad.safetensors");
  Tensor t = patterned({2}, DType::kF32, 1);
  expect_error([&] { write_safetensors(path, {{"w", t}, {"w", t}}); }, path,
               {"duplicate tensor name 'w'"});
  expect_error([&] { write_safetensors(path, {{"__metadata__", t}}); }, path, {"__metadata__"});
  expect_error(
      [&] { write_safetensors(path, {{"packed", patterned({4}, DType::kF4E2M1, 0)}}); }, path,
      {"'packed'", "F4_E2M1"});
  expect_error([&] { write_safetensors(tmp.file("no/such/dir.safetensors"), {{"w", t}}); },
               tmp.file("no/such/dir.safetensors"), {"cannot create"});
}

// One malformed file per case: its bytes, and what the message must mention besides the path.
struct BadCase {
  const char* name;
  std::string bytes;
  std::vector<std::string> parts;
};

std::string entry(const std::string& name, const std::string& body) {
  return "{\"" + name + "\":{" + body + "}}";
}

std::vector<BadCase> bad_cases() {
  const std::string ok_shape = R"("shape":[2],"data_offsets":[0,8])";
  const std::string data(16, '\0');
  return {
      {"empty file", "", {"0 bytes", "too short"}},
      {"five bytes", "12345", {"5 bytes", "too short"}},
      {"length past EOF", u64_le(1000) + "{}", {"header length 1000", "past the end"}},
      {"absurd length", u64_le(200'000'000) + std::string(16, ' '), {"absurd"}},
      {"not JSON", st_bytes("hello"), {"header", "invalid JSON"}},
      {"truncated JSON", st_bytes(R"({"w":{"dtype":)"), {"invalid JSON"}},
      {"trailing garbage", st_bytes("{} x"), {"invalid JSON"}},
      {"bad UTF-8", st_bytes("{\"w\xff\":{}}"), {"invalid JSON", "UTF-8"}},
      {"NUL in header", st_bytes(std::string("{}\0", 3)), {"invalid JSON"}},
      {"number overflow", st_bytes(entry("w", R"("dtype":"F32","shape":[1e999])")),
       {"invalid JSON"}},
      {"array header", st_bytes("[1,2]"), {"must be a JSON object, got array"}},
      {"entry not object", st_bytes(R"({"w":5})"), {"tensor 'w'", "expected an object"}},
      {"missing dtype", st_bytes(entry("w", ok_shape), data), {"tensor 'w'", "missing 'dtype'"}},
      {"missing shape", st_bytes(entry("w", R"("dtype":"F32","data_offsets":[0,8])"), data),
       {"tensor 'w'", "missing 'shape'"}},
      {"missing offsets", st_bytes(entry("w", R"("dtype":"F32","shape":[2])"), data),
       {"tensor 'w'", "missing 'data_offsets'"}},
      {"dtype not string", st_bytes(entry("w", R"("dtype":4,)" + ok_shape), data),
       {"tensor 'w'", "'dtype' must be a string, got integer"}},
      {"unknown dtype", st_bytes(entry("w", R"("dtype":"F99",)" + ok_shape), data),
       {"tensor 'w'", "unknown dtype \"F99\""}},
      {"packed F4 dtype", st_bytes(entry("w", R"("dtype":"F4_E2M1",)" + ok_shape), data),
       {"tensor 'w'", "unknown dtype"}},
      {"shape not list",
       st_bytes(entry("w", R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), data),
       {"tensor 'w'", "'shape' must be a list of integers, got integer"}},
      {"float dim", st_bytes(entry("w", R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])"), data),
       {"tensor 'w'", "'shape' must be a list of integers"}},
      {"bool dim", st_bytes(entry("w", R"("dtype":"U8","shape":[true],"data_offsets":[0,1])"), data),
       {"tensor 'w'", "'shape' must be a list of integers"}},
      {"negative dim", st_bytes(entry("w", R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"), data),
       {"tensor 'w'", "negative dimension -2"}},
      {"huge dim",
       st_bytes(entry("w", R"("dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8])"),
                data),
       {"tensor 'w'", "too large"}},
      {"numel overflow",
       st_bytes(entry("w", R"("dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8])"),
                data),
       {"tensor 'w'", "too large"}},
      {"partial product overflow before a zero dim",
       st_bytes(entry("w", R"("dtype":"U8","shape":[4611686018427387904,2,0],"data_offsets":[0,0])"),
                data),
       {"tensor 'w'", "too large"}},
      {"bytes overflow",
       st_bytes(entry("w", R"("dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,8])"),
                data),
       {"tensor 'w'", "too large"}},
      {"one offset", st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[0])"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"three offsets",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,8,9])"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"string offset",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":["0",8])"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"negative offset",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"float offset",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,8.0])"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"offsets object",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":{"a":1})"), data),
       {"tensor 'w'", "'data_offsets' must be [begin, end]"}},
      {"decreasing offsets",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), data),
       {"tensor 'w'", "data_offsets [8, 0] decrease"}},
      {"offsets past data",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[12,20])"), data),
       {"tensor 'w'", "run past the data section (16 bytes)"}},
      {"no data section",
       st_bytes(entry("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])")),
       {"tensor 'w'", "run past the data section (0 bytes)"}},
      {"size mismatch",
       st_bytes(entry("w", R"("dtype":"BF16","shape":[2,3],"data_offsets":[0,8])"), data),
       {"tensor 'w'", "hold 8 bytes but BF16[2, 3] needs 12"}},
      {"overlap",
       st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                data),
       {"'a' [0, 8)", "'b' [4, 12)", "overlap"}},
      {"same bytes twice",
       st_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})",
                data),
       {"'a'", "'b'", "overlap"}},
      {"duplicate tensor",
       st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                data),
       {"duplicate key 'w' at the top level"}},
      {"duplicate field",
       st_bytes(entry("w", R"("dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8])"), data),
       {"duplicate key 'dtype' in 'w'"}},
      {"metadata not object", st_bytes(R"({"__metadata__":["pt"]})"),
       {"'__metadata__' must be an object of strings, got array"}},
      {"metadata value not string", st_bytes(R"({"__metadata__":{"format":"pt","n":3}})"),
       {"'__metadata__' field 'n': expected string, got integer"}},
      {"duplicate metadata key", st_bytes(R"({"__metadata__":{"a":"1","a":"2"}})"),
       {"duplicate key 'a' in '__metadata__'"}},
  };
}

TEST(SafetensorsHeaderTest, EveryMalformedFileIsAnErrorNamingFileAndField) {
  TempDir tmp;
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    std::string path = tmp.file("bad.safetensors");
    write_bytes(path, c.bytes);
    expect_error([&] { SafetensorsFile::open(path); }, path, c.parts);
    // The same through the in-memory parser.
    expect_error([&] { parse_safetensors_header(c.bytes, c.bytes.size(), "mem"); }, "mem: ",
                 c.parts);
  }
}

TEST(SafetensorsHeaderTest, ParserNeedsTheWholeHeader) {
  std::string bytes = st_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  // Only the first 20 bytes handed over, though the file is long enough.
  expect_error([&] { parse_safetensors_header(bytes.substr(0, 20), bytes.size(), "f"); }, "f: ",
               {"only 20 bytes given"});
  expect_error([&] { parse_safetensors_header(bytes.substr(0, 4), bytes.size(), "f"); }, "f: ",
               {"only 4 bytes given"});
  SafetensorsHeader h = parse_safetensors_header(bytes, bytes.size(), "f");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.data_offset, bytes.size() - 1);
}
