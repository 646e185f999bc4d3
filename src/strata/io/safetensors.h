// A safetensors file read over mmap, with its header validated strictly.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/tensor.h"

namespace strata {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0;  // byte offsets into the data section
  size_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;  // where the data section starts in the file
};

// Parses and validates a safetensors header. `file_bytes` is the whole file (or at least its
// header) and `file_size` the file's real size. Checks: the 8-byte length is within the file,
// the header is a JSON object of tensors (and an optional __metadata__ of strings), dtypes are
// known, shapes are non-negative, every [begin, end) lies inside the data section,
// end - begin == numel * dtype size, and no two tensors overlap. `origin` (the file's path)
// starts every error message.
SafetensorsHeader parse_safetensors_header(std::string_view file_bytes, size_t file_size,
                                           const std::string& origin);

class SafetensorsFile {
 public:
  // mmaps `path` read-only and validates its header; throws Error naming the path.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const TensorInfo* find(const std::string& name) const;  // nullptr when absent
  // A zero-copy CPU tensor over the mapping (it keeps the mapping alive).
  Tensor get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
  std::shared_ptr<void> mapping_;
  const char* base_ = nullptr;
  size_t size_ = 0;
};

// Writes tensors (CPU, contiguous) as a safetensors file; used by tests and tools.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace strata
