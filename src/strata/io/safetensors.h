// A safetensors file read over mmap, with its header validated strictly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/tensor.h"

namespace strata {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  size_t begin = 0;  // byte offsets into the data section
  size_t end = 0;
  size_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by data offset (then name): file order
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;  // where the data section starts in the file
};

// The largest header accepted: real headers are well under 10 MB, and a bigger length is
// almost certainly a corrupt or hostile file.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The safetensors spelling of a dtype ("BF16", "F8_E8M0" for kUE8M0); "" for kF4E2M1, which
// checkpoints store packed as U8.
std::string_view safetensors_dtype_name(DType t);

// Parses and validates a safetensors header. `file_bytes` is the whole file (or at least its
// header) and `file_size` the file's real size. Checks: the 8-byte length is within the file
// (and at most kMaxSafetensorsHeaderBytes), the header is UTF-8 JSON holding an object of
// tensors (and an optional __metadata__ object of strings), no key repeats, every entry has a
// known string dtype, a shape of non-negative integers and data_offsets of two non-decreasing
// integers, every [begin, end) lies inside the data section, end - begin == numel * dtype size,
// and no two tensors share a byte. Every error is a strata::Error starting with `origin` (the
// file's path) and naming the tensor or field at fault.
SafetensorsHeader parse_safetensors_header(std::string_view file_bytes, size_t file_size,
                                           const std::string& origin);

// A whole file mapped read-only (POSIX mmap); unmapped when the last owner lets go. Tensors
// viewing the mapping hold a reference, so they stay valid after the SafetensorsFile is gone.
class MappedFile {
 public:
  // Throws Error naming the path when the file cannot be opened, stat'ed or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const char* data() const { return static_cast<const char*>(addr_); }  // nullptr when empty
  size_t size() const { return size_; }
  std::string_view bytes() const { return {data(), size_}; }

  struct Key {  // lets open() use make_shared while only open() can construct
   private:
    friend class MappedFile;
    Key() = default;
  };
  explicit MappedFile(Key) {}

 private:
  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

class SafetensorsFile {
 public:
  // mmaps `path` read-only and validates its header; throws Error naming the path.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  // A CPU tensor over the mapping that keeps the mapping alive. The memory is read-only: write
  // to a copy. Zero-copy when the data is aligned to its element size (always so for files from
  // the reference writer, which pads the header to 8 bytes); a misaligned tensor is copied so
  // that typed loads stay defined. Throws "PATH: missing tensor 'NAME'".
  Tensor get(const std::string& name) const;
  // Where `name`'s bytes start in the mapping (read-only, valid while this file lives; any
  // alignment). Throws like get().
  const char* data(const std::string& name) const;

  struct Key {  // lets open() use make_shared while only open() can construct
   private:
    friend class SafetensorsFile;
    Key() = default;
  };
  explicit SafetensorsFile(Key) {}

 private:
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;  // name -> index into header_.tensors
  std::shared_ptr<MappedFile> mapping_;
};

// Writes CPU tensors as a safetensors file; used by tests and tools. The header is padded to
// 8 bytes and the data ordered by element size, largest first, so every tensor is aligned. Throws Error naming the path and tensor on a duplicate or reserved
// name, a non-CPU tensor, a dtype safetensors cannot spell, or an I/O failure.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace strata
