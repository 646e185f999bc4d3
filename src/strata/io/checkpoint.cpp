#include "strata/io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "strata/core/error.h"
#include "strata/io/config.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Files = std::vector<std::shared_ptr<SafetensorsFile>>;

// Shards are named relative to the folder; an absolute path or ".." would let an index read
// files elsewhere.
bool is_inside_name(const std::string& file) {
  if (file.empty()) return false;
  fs::path p(file);
  if (p.is_absolute()) return false;
  return std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

void load_index(const fs::path& root, const std::string& index_path, Files* files,
                std::map<std::string, size_t>* where) {
  Json index = read_json_file(index_path);
  if (!index.is_object())
    fail(index_path, ": expected a JSON object, got ", json_type_name(index));
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) fail(index_path, ": missing 'weight_map'");
  if (!weight_map->is_object())
    fail(index_path, ": 'weight_map' must be an object, got ", json_type_name(*weight_map));

  std::map<std::string, size_t> shard_slot;  // shard file name -> index into files
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string())
      fail(index_path, ": weight_map['", name, "']: expected a shard file name, got ",
           json_type_name(shard));
    const auto& file = shard.get_ref<const std::string&>();
    auto slot = shard_slot.find(file);
    if (slot == shard_slot.end()) {
      if (!is_inside_name(file))
        fail(index_path, ": weight_map['", name, "']: shard '", file,
             "' must be a relative path inside the checkpoint folder");
      fs::path shard_path = root / file;
      std::error_code ec;
      if (!fs::is_regular_file(shard_path, ec))
        fail(index_path, ": weight_map points tensor '", name, "' at shard '", file,
             "', which does not exist");
      files->push_back(SafetensorsFile::open(shard_path.string()));
      slot = shard_slot.emplace(file, files->size() - 1).first;
    }
    if ((*files)[slot->second]->find(name) == nullptr)
      fail(index_path, ": weight_map points tensor '", name, "' at shard '", file,
           "', which does not contain it");
    (*where)[name] = slot->second;
  }
}

void load_all(const fs::path& root, const std::string& dir, Files* files,
              std::map<std::string, size_t>* where) {
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    // is_regular_file follows symlinks, as in the Hugging Face cache's snapshot folders.
    std::error_code type_ec;
    if (it->path().extension() == ".safetensors" && it->is_regular_file(type_ec))
      paths.push_back(it->path());
  }
  if (ec) fail(dir, ": cannot list the folder: ", ec.message());
  if (paths.empty()) fail(dir, ": no model.safetensors.index.json and no *.safetensors files");
  std::sort(paths.begin(), paths.end());

  for (const fs::path& path : paths) {
    files->push_back(SafetensorsFile::open(path.string()));
    const SafetensorsFile& file = *files->back();
    for (const TensorInfo& t : file.header().tensors) {
      auto [it, inserted] = where->emplace(t.name, files->size() - 1);
      if (!inserted)
        fail(dir, ": tensor '", t.name, "' is in both '", (*files)[it->second]->path(),
             "' and '", file.path(), "'");
    }
  }
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, ": not a directory (expected a checkpoint folder)");
  fs::path root(dir);
  Checkpoint ck;
  ck.dir_ = dir;
  ck.config_path_ = (root / "config.json").string();
  ck.config_ = read_json_file(ck.config_path_);

  fs::path index = root / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    load_index(root, index.string(), &ck.files_, &ck.where_);
  } else {
    load_all(root, dir, &ck.files_, &ck.where_);
  }
  return ck;
}

Checkpoint Checkpoint::open_config_only(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, ": not a directory (expected a folder with config.json)");
  Checkpoint ck;
  ck.dir_ = dir;
  ck.config_path_ = (fs::path(dir) / "config.json").string();
  ck.config_ = read_json_file(ck.config_path_);
  ck.weightless_ = true;
  return ck;
}

size_t Checkpoint::file_index(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(dir_, ": missing tensor '", name, "'");
  return it->second;
}

bool Checkpoint::has(const std::string& name) const { return where_.count(name) != 0; }

const TensorInfo& Checkpoint::info(const std::string& name) const {
  return *files_[file_index(name)]->find(name);
}

Tensor Checkpoint::get(const std::string& name) const { return files_[file_index(name)]->get(name); }

const char* Checkpoint::data(const std::string& name) const { return files_[file_index(name)]->data(name); }

size_t Checkpoint::tensor_bytes() const {
  size_t n = 0;
  for (const auto& [name, slot] : where_) n += files_[slot]->find(name)->nbytes();
  return n;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, slot] : where_) out.push_back(name);
  return out;  // std::map iterates in sorted order
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  return files_[file_index(name)]->path();
}

}  // namespace strata
