#include "strata/io/npy.h"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "strata/core/error.h"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              ".npy '<f4' data is written straight from memory");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// Magic, version 1.0, header length and the header dict, padded with spaces so that the data
// starts on a 64-byte boundary, ending in '\n' as numpy does.
std::string npy_header(const Shape& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";  // (5,) is a tuple, (5) is not
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  STRATA_CHECK(dict.size() <= 0xffff, ".npy header too long for version 1.0 (shape ",
               shape_str(shape), ")");
  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\x00';
  out += char(dict.size() & 0xff);
  out += char(dict.size() >> 8);
  return out + dict;
}

Tensor as_f32(const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined(), what, ": tensor has no data");
  STRATA_CHECK(t.device() == Device::kCpu, what, ": tensor ", t.describe(), " is not on the CPU");
  return t.dtype() == DType::kF32 ? t : t.to_f32();
}

// Parses the Python dict literal of a .npy header: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }. Only the literal forms numpy writes are accepted.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& origin) : s_(text), origin_(origin) {}

  std::string descr;
  bool fortran_order = false;
  Shape shape;

  void parse() {
    std::set<std::string> seen;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = parse_string();
      if (!seen.insert(key).second) bad("duplicate key '", key, "'");
      expect(':');
      if (key == "descr") {
        skip_ws();
        descr = parse_string();
      } else if (key == "fortran_order") {
        fortran_order = parse_bool();
      } else if (key == "shape") {
        parse_shape();
      } else {
        bad("unexpected key '", key, "'");
      }
      skip_ws();
      if (peek() != ',') break;
      ++pos_;
    }
    expect('}');
    skip_ws();
    if (pos_ != s_.size()) bad("unexpected text after the header dict at byte ", pos_);
    for (const char* key : {"descr", "fortran_order", "shape"})
      if (!seen.count(key)) bad("missing key '", key, "'");
  }

 private:
  template <class... Args>
  [[noreturn]] void bad(Args&&... parts) const {
    fail(origin_, ": bad .npy header: ", std::forward<Args>(parts)...);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' ||
                                s_[pos_] == '\r'))
      ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) bad("expected '", c, "' at byte ", pos_);
    ++pos_;
  }
  std::string parse_string() {
    skip_ws();
    char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected a quoted string at byte ", pos_);
    size_t close = s_.find(quote, pos_ + 1);
    if (close == std::string_view::npos) bad("unterminated string at byte ", pos_);
    std::string out(s_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
    return out;
  }
  bool parse_bool() {
    skip_ws();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (s_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    bad("'fortran_order' must be True or False");
  }
  void parse_shape() {
    expect('(');
    while (true) {
      skip_ws();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') bad("'shape' must be a tuple of non-negative integers");
      int64_t d = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (d > (std::numeric_limits<int64_t>::max() - 9) / 10) bad("dimension too large");
        d = d * 10 + (s_[pos_++] - '0');
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      shape.push_back(d);
      skip_ws();
      if (peek() != ',') break;
      ++pos_;
    }
    expect(')');
  }

  std::string_view s_;
  const std::string& origin_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode_npy(const Tensor& t) {
  Tensor f = as_f32(t, "encode_npy");
  std::string out = npy_header(f.shape());
  out.append(static_cast<const char*>(f.raw()), f.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) {
  Tensor f = as_f32(t, path.c_str());
  std::string header = npy_header(f.shape());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, ": cannot create: ", std::strerror(errno));
  out.write(header.data(), std::streamsize(header.size()));
  // Streamed rather than encoded in memory: logits can be hundreds of MB.
  if (f.nbytes() > 0) out.write(static_cast<const char*>(f.raw()), std::streamsize(f.nbytes()));
  out.close();
  if (!out) fail(path, ": write failed: ", std::strerror(errno));
}

Tensor decode_npy(std::string_view bytes, const std::string& origin) {
  if (bytes.size() < 10 || bytes.substr(0, kMagicLen) != std::string_view(kMagic, kMagicLen))
    fail(origin, ": not a .npy file (no \\x93NUMPY magic)");
  int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  size_t len_bytes = major == 1 ? 2 : 4;  // versions 2 and 3 widen the header length
  if (major < 1 || major > 3) fail(origin, ": unsupported .npy version ", major, ".", minor);
  if (bytes.size() < 8 + len_bytes) fail(origin, ": truncated .npy header length");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  size_t data_start = 8 + len_bytes + header_len;
  if (data_start > bytes.size())
    fail(origin, ": .npy header length ", header_len, " runs past the end of the file (",
         bytes.size(), " bytes)");

  HeaderParser h(bytes.substr(8 + len_bytes, header_len), origin);
  h.parse();
  size_t item = 0;
  if (h.descr == "<f4") item = 4;
  if (h.descr == "<f8") item = 8;
  if (item == 0) fail(origin, ": unsupported .npy descr '", h.descr, "' (want '<f4' or '<f8')");
  if (h.fortran_order && h.shape.size() > 1)
    fail(origin, ": Fortran-order .npy arrays are not supported");
  uint64_t numel = 1, need = 0;
  bool overflow = false;
  // Every partial product must fit int64 (shape_numel's type), even when a later dim is 0.
  for (int64_t d : h.shape)
    overflow |= __builtin_mul_overflow(numel, uint64_t(d), &numel) ||
                numel > uint64_t(std::numeric_limits<int64_t>::max());
  overflow |= __builtin_mul_overflow(numel, uint64_t(item), &need);
  size_t have = bytes.size() - data_start;
  if (overflow || need != have)
    fail(origin, ": shape ", shape_str(h.shape), " of '", h.descr, "' needs ",
         overflow ? std::string("too many") : std::to_string(need), " data bytes, file has ",
         have);

  Tensor out = Tensor::empty(h.shape, DType::kF32);
  const char* src = bytes.data() + data_start;
  if (item == 4) {
    if (need > 0) std::memcpy(out.raw(), src, need);
  } else {
    float* dst = out.data<float>();
    for (uint64_t i = 0; i < numel; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      // Out-of-range double -> float is undefined behaviour in C++; saturate to infinity.
      if (v > std::numeric_limits<float>::max()) v = HUGE_VAL;
      if (v < -std::numeric_limits<float>::max()) v = -HUGE_VAL;
      dst[i] = float(v);
    }
  }
  return out;
}

Tensor read_npy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, expected a .npy file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail(path, ": read error: ", std::strerror(errno));
  return decode_npy(buf.str(), path);
}

}  // namespace strata
