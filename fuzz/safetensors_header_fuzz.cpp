// Fuzzes the safetensors header parser, then (for headers it accepts) SafetensorsFile over an
// in-memory file. Anything but a strata::Error, or an accepted header that breaks the documented
// invariants, is a bug.
//
// An input starting with '{' is also tried as "JSON, NUL, data" with a correct length prefix,
// so that mutations reach the JSON and the checks behind it instead of dying on the length.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "strata/core/error.h"
#include "strata/io/safetensors.h"

namespace {

constexpr char kOrigin[] = "fuzz.safetensors";

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Re-reads the bytes through SafetensorsFile (mmap, get, to_f32) using a memfd, not a disk file.
void check_file(std::string_view bytes) {
  int fd = ::memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size())) {
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    auto file = strata::SafetensorsFile::open(path);  // the same header: must not throw
    for (const strata::TensorInfo& t : file->header().tensors) {
      strata::Tensor v = file->get(t.name);
      require(v.nbytes() == t.nbytes() && v.shape() == t.shape);
      if (v.numel() > 0 && v.numel() < (1 << 16) && t.dtype != strata::DType::kF4E2M1)
        (void)v.to_f32();
    }
  }
  ::close(fd);
}

void check(std::string_view bytes) {
  strata::SafetensorsHeader h;
  try {
    h = strata::parse_safetensors_header(bytes, bytes.size(), kOrigin);
  } catch (const strata::Error& e) {
    require(std::string_view(e.what()).substr(0, sizeof(kOrigin) - 1) == kOrigin);
    return;
  }
  // Invariants of an accepted header; the reads let ASan check the bounds.
  require(h.data_offset >= 8 && h.data_offset <= bytes.size());
  size_t data_size = bytes.size() - h.data_offset;
  size_t prev_begin = 0;
  for (const strata::TensorInfo& t : h.tensors) {
    require(t.begin <= t.end && t.end <= data_size && t.begin >= prev_begin);
    prev_begin = t.begin;
    require(t.nbytes() == size_t(strata::shape_numel(t.shape)) * strata::dtype_size(t.dtype));
    if (t.nbytes() > 0) {
      volatile char first = bytes[h.data_offset + t.begin];
      volatile char last = bytes[h.data_offset + t.end - 1];
      (void)first;
      (void)last;
    }
  }
  check_file(bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(bytes);
  if (size > 0 && data[0] == '{') {
    size_t nul = bytes.find('\0');
    std::string_view json = bytes.substr(0, nul);
    std::string_view rest = nul == std::string_view::npos ? "" : bytes.substr(nul + 1);
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
    file.append(json);
    file.append(rest);
    check(file);
  }
  return 0;
}
