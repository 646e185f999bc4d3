// .npy writing and reading: the exact version 1.0 header numpy writes, round trips, '<f8'
// input, and malformed files as Errors naming the path.
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
#include "strata/io/npy.h"

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
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

Tensor iota(Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.25f * float(i) - 1.0f;
  return t;
}

// A version 1.0 file with the given header dict (padded as numpy pads it) and data.
std::string npy_v1(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

std::string error_of(const std::string& path) {
  try {
    read_npy(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(NpyTest, HeaderIsWhatNumpyWrites) {
  std::string bytes = encode_npy(iota({2, 3}));
  ASSERT_GE(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  std::string header = bytes.substr(10, header_len);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 24);

  std::string one = encode_npy(iota({5}));
  EXPECT_NE(one.find("'shape': (5,), }"), std::string::npos);  // a 1-tuple needs the comma
  EXPECT_NE(encode_npy(iota({})).find("'shape': (), }"), std::string::npos);
}

TEST(NpyTest, RoundTrips) {
  TempDir tmp;
  for (const Shape& shape : {Shape{2, 3}, Shape{7}, Shape{}, Shape{0, 3}, Shape{2, 1, 4, 3}}) {
    SCOPED_TRACE(shape_str(shape));
    std::string path = tmp.file("a.npy");
    Tensor t = iota(shape);
    write_npy(path, t);
    EXPECT_EQ(read_bytes(path), encode_npy(t));
    Tensor back = read_npy(path);
    EXPECT_EQ(back.dtype(), DType::kF32);
    EXPECT_EQ(back.shape(), shape);
    ASSERT_EQ(back.numel(), t.numel());
    if (t.numel() > 0) {
      EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0);
    }
  }
}

TEST(NpyTest, ConvertsOtherDtypesOnWrite) {
  Tensor b = Tensor::empty({3}, DType::kBF16);
  for (int i = 0; i < 3; ++i) b.data<uint16_t>()[i] = f32_to_bf16(float(i) + 0.5f);
  Tensor back = decode_npy(encode_npy(b), "mem");
  EXPECT_EQ(back.data<float>()[2], 2.5f);
  EXPECT_THROW(encode_npy(Tensor()), Error);
}

TEST(NpyTest, ReadsFloat64AndOtherHeaderSpellings) {
  TempDir tmp;
  double values[3] = {1.5, -2.0, 1e300};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  std::string path = tmp.file("f8.npy");
  // Keys in another order, double quotes, no trailing comma, Python 2 long.
  write_bytes(path, npy_v1("{\"shape\": (3L,), \"fortran_order\": False, \"descr\": '<f8'}", data));
  Tensor t = read_npy(path);
  EXPECT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.0f);
  EXPECT_TRUE(std::isinf(t.data<float>()[2]));  // saturated, not undefined behaviour
  // A 1-D array may say fortran_order True: it is the same layout.
  write_bytes(path, npy_v1("{'descr': '<f8', 'fortran_order': True, 'shape': (3,), }", data));
  EXPECT_EQ(read_npy(path).data<float>()[1], -2.0f);
  // Version 2.0 widens the header length to 4 bytes.
  std::string v1 = encode_npy(iota({2}));
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + v1.substr(8, 2) + std::string(2, '\0') +
                   v1.substr(10);
  EXPECT_EQ(decode_npy(v2, "v2").data<float>()[1], -0.75f);
}

TEST(NpyTest, ReadsTheFixtureLogitsByteExactly) {
  std::string path = STRATA_SOURCE_DIR "/tests/fixtures/qwen3_5_tiny/logits.npy";
  if (!fs::exists(path)) GTEST_SKIP() << "no fixture " << path;
  Tensor logits = read_npy(path);
  EXPECT_EQ(logits.ndim(), 2);
  // numpy wrote the fixture; writing it back must give the same bytes.
  EXPECT_EQ(encode_npy(logits), read_bytes(path));
}

TEST(NpyTest, MalformedFilesNameThePath) {
  TempDir tmp;
  std::string path = tmp.file("bad.npy");
  std::string f4(8, '\0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not a .npy file"},
      {"NUMPY-but-not-really", "not a .npy file"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10), "unsupported .npy version 4.0"},
      {std::string("\x93NUMPY\x01\x00\xff\x00", 10) + "{}", "runs past the end"},
      {npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
       "unsupported .npy descr '>f4'"},
      {npy_v1("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", f4),
       "unsupported .npy descr '<i4'"},
      {npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }", f4), "Fortran"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4),
       "needs 12 data bytes, file has 8"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", f4),
       "needs 4 data bytes, file has 8"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
              f4),
       "needs too many data bytes"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 2, 0), }",
              ""),
       "needs too many data bytes"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False}", f4), "missing key 'shape'"},
      {npy_v1("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", f4),
       "duplicate key 'descr'"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", f4),
       "unexpected key 'x'"},
      {npy_v1("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", f4), "True or False"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", f4),
       "tuple of non-negative integers"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", f4),
       "dimension too large"},
      {npy_v1("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", f4), "expected"},
      {npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", f4),
       "unexpected text"},
  };
  for (const auto& [bytes, want] : cases) {
    SCOPED_TRACE(want);
    write_bytes(path, bytes);
    std::string msg = error_of(path);
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  }
  std::string missing = tmp.file("missing.npy");
  EXPECT_EQ(error_of(missing).rfind(missing + ": cannot open", 0), 0u);
  EXPECT_EQ(error_of(tmp.file("")).rfind(tmp.file(""), 0), 0u);  // a directory
}
