#include "strata/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/io/config.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// A JSON value for an error message, cut short: fuzzed or corrupt headers can hold huge values.
std::string short_dump(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

uint64_t read_u64_le(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A file descriptor closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

const Json& require(const Json& entry, const char* field, const std::string& origin,
                    const std::string& name) {
  auto it = entry.find(field);
  if (it == entry.end()) fail(origin, ": tensor '", name, "': missing '", field, "'");
  return *it;
}

TensorInfo parse_entry(const std::string& name, const Json& entry, size_t data_size,
                       const std::string& origin) {
  auto bad = [&](auto&&... parts) { fail(origin, ": tensor '", name, "': ", parts...); };
  if (!entry.is_object())
    bad("expected an object with dtype, shape and data_offsets, got ", json_type_name(entry));
  TensorInfo info;
  info.name = name;

  const Json& dtype = require(entry, "dtype", origin, name);
  if (!dtype.is_string()) bad("'dtype' must be a string, got ", json_type_name(dtype));
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  if (!dtype_from_safetensors(dtype_str, &info.dtype)) bad("unknown dtype ", short_dump(dtype));

  const Json& shape = require(entry, "shape", origin, name);
  if (!shape.is_array()) bad("'shape' must be a list of integers, got ", json_type_name(shape));
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (const Json& d : shape) {
    if (!d.is_number_integer())
      bad("'shape' must be a list of integers, got ", short_dump(shape));
    if (!d.is_number_unsigned()) bad("negative dimension ", d.get<int64_t>(), " in 'shape'");
    uint64_t u = d.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      bad("dimension ", u, " in 'shape' is too large");
    info.shape.push_back(int64_t(u));
    // Every partial product must fit int64 (shape_numel's type), even when a later dim is 0.
    numel_overflow |= __builtin_mul_overflow(numel, u, &numel) ||
                      numel > uint64_t(std::numeric_limits<int64_t>::max());
  }

  const Json& offsets = require(entry, "data_offsets", origin, name);
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    bad("'data_offsets' must be [begin, end] with non-negative integers, got ",
        short_dump(offsets));
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end) bad("data_offsets [", begin, ", ", end, "] decrease");
  if (end > data_size)
    bad("data_offsets [", begin, ", ", end, "] run past the data section (", data_size,
        " bytes)");
  uint64_t need = 0;
  if (numel_overflow || __builtin_mul_overflow(numel, dtype_size(info.dtype), &need))
    bad("shape ", shape_str(info.shape), " is too large");
  if (end - begin != need)
    bad("data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes but ", dtype_str,
        shape_str(info.shape), " needs ", need);
  info.begin = size_t(begin);
  info.end = size_t(end);
  return info;
}

void parse_metadata(const Json& meta, const std::string& origin,
                    std::map<std::string, std::string>* out) {
  if (!meta.is_object())
    fail(origin, ": '__metadata__' must be an object of strings, got ", json_type_name(meta));
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      fail(origin, ": '__metadata__' field '", key, "': expected string, got ",
           json_type_name(value));
    (*out)[key] = value.get<std::string>();
  }
}

// Tensors sorted by offset must not share a byte; empty tensors hold no bytes.
void check_no_overlap(const std::vector<TensorInfo>& sorted, const std::string& origin) {
  const TensorInfo* furthest = nullptr;  // the non-empty tensor that ends last so far
  for (const TensorInfo& t : sorted) {
    if (t.begin == t.end) continue;
    if (furthest != nullptr && t.begin < furthest->end)
      fail(origin, ": tensors '", furthest->name, "' [", furthest->begin, ", ", furthest->end,
           ") and '", t.name, "' [", t.begin, ", ", t.end, ") overlap");
    if (furthest == nullptr || t.end > furthest->end) furthest = &t;
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kUE8M0: return "F8_E8M0";
    case DType::kF4E2M1: return "";
    default: return dtype_name(t);
  }
}

SafetensorsHeader parse_safetensors_header(std::string_view file_bytes, size_t file_size,
                                           const std::string& origin) {
  if (file_size < 8)
    fail(origin, ": file is ", file_size, " bytes, too short for the 8-byte header length");
  if (file_bytes.size() < 8)
    fail(origin, ": only ", file_bytes.size(), " bytes given, need the 8-byte header length");
  uint64_t n = read_u64_le(file_bytes.data());
  if (n > kMaxSafetensorsHeaderBytes)
    fail(origin, ": header length ", n, " is absurd (more than ", kMaxSafetensorsHeaderBytes,
         " bytes); not a safetensors file?");
  if (n > file_size - 8)
    fail(origin, ": header length ", n, " runs past the end of the file (", file_size,
         " bytes)");
  if (file_bytes.size() - 8 < n)
    fail(origin, ": only ", file_bytes.size(), " bytes given, the header needs ", 8 + n);

  Json root = parse_json(file_bytes.substr(8, n), origin + ": header");
  if (!root.is_object())
    fail(origin, ": header must be a JSON object, got ", json_type_name(root));

  SafetensorsHeader header;
  header.data_offset = size_t(8 + n);
  size_t data_size = file_size - header.data_offset;
  header.tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, origin, &header.metadata);
    } else {
      header.tensors.push_back(parse_entry(name, entry, data_size, origin));
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              if (a.begin != b.begin) return a.begin < b.begin;
              if (a.end != b.end) return a.end < b.end;
              return a.name < b.name;
            });
  check_no_overlap(header.tensors, origin);
  return header;
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file");
  auto m = std::make_shared<MappedFile>(Key());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ == 0) return m;  // mmap rejects length 0
  void* addr = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) fail(path, ": cannot mmap ", m->size_, " bytes: ", std::strerror(errno));
  m->addr_ = addr;
  return m;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto f = std::make_shared<SafetensorsFile>(Key());
  f->path_ = path;
  f->mapping_ = MappedFile::open(path);
  f->header_ = parse_safetensors_header(f->mapping_->bytes(), f->mapping_->size(), path);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i)
    f->index_.emplace(f->header_.tensors[i].name, i);
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const char* SafetensorsFile::data(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail(path_, ": missing tensor '", name, "'");
  return mapping_->data() + header_.data_offset + info->begin;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail(path_, ": missing tensor '", name, "'");
  const char* ptr = data(name);
  if (reinterpret_cast<uintptr_t>(ptr) % dtype_size(info->dtype) != 0) {
    Tensor copy = Tensor::empty(info->shape, info->dtype);
    std::memcpy(copy.raw(), ptr, info->nbytes());
    return copy;
  }
  // The mapping is PROT_READ: the const_cast only satisfies Tensor's interface.
  return Tensor::view_of(mapping_, const_cast<char*>(ptr), info->shape, info->dtype);
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Data goes in order of element size, largest first (as the reference writer orders it):
  // with the 8-byte-aligned data section every tensor is then aligned, and there are no holes.
  std::vector<const std::pair<std::string, Tensor>*> order;
  for (const auto& entry : tensors) order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return dtype_size(a->second.dtype()) > dtype_size(b->second.dtype());
  });
  Json header = Json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto* item : order) {
    const auto& [name, t] = *item;
    STRATA_CHECK(name != "__metadata__", path, ": '__metadata__' cannot name a tensor");
    STRATA_CHECK(seen.insert(name).second, path, ": duplicate tensor name '", name, "'");
    STRATA_CHECK(t.device() == Device::kCpu, path, ": tensor '", name, "' is not on the CPU");
    STRATA_CHECK(t.defined(), path, ": tensor '", name, "' has no data");
    std::string_view dt = safetensors_dtype_name(t.dtype());
    STRATA_CHECK(!dt.empty(), path, ": tensor '", name, "': safetensors has no dtype for ",
                 dtype_name(t.dtype()), " (store packed F4_E2M1 as U8)");
    Json entry = Json::object();
    entry["dtype"] = std::string(dt);
    entry["shape"] = t.shape();
    entry["data_offsets"] = Json::array({offset, offset + t.nbytes()});
    header[name] = std::move(entry);
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, ": cannot create: ", std::strerror(errno));
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto* item : order) {
    const Tensor& t = item->second;
    if (t.nbytes() > 0) out.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
  }
  out.close();
  if (!out) fail(path, ": write failed: ", std::strerror(errno));
}

}  // namespace strata
