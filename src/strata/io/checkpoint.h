// A Hugging Face checkpoint folder: config.json plus one or more safetensors files.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/io/safetensors.h"

namespace strata {

class Checkpoint {
 public:
  // Opens DIR: reads DIR/config.json, then DIR/model.safetensors.index.json (sharded) or, when
  // there is no index, every DIR/*.safetensors (a tensor in two files is an error). With an
  // index, only its weight_map names are exposed, and each must point at an existing shard that
  // holds it (so stray files such as Mistral's consolidated.safetensors are ignored). Each file
  // is mapped once. Throws Error naming the file at fault (and the shard and tensor).
  static Checkpoint open(const std::string& dir);
  // DIR/config.json alone, with no tensors: for --load-format dummy, whose weights are made up
  // at the shapes the config implies. weightless() tells such a checkpoint apart.
  static Checkpoint open_config_only(const std::string& dir);
  bool weightless() const { return weightless_; }

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }  // config.json as written
  // DIR/config.json, the origin for ConfigView error messages.
  const std::string& config_path() const { return config_path_; }

  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws "DIR: missing tensor 'NAME'"
  Tensor get(const std::string& name) const;              // zero-copy view, any dtype
  // Where `name`'s bytes start in its file's mapping (any alignment); throws like info().
  const char* data(const std::string& name) const;
  size_t tensor_bytes() const;                            // of every tensor named here
  std::vector<std::string> names() const;                 // sorted
  // The file that holds `name` (for error messages); throws like info().
  const std::string& file_of(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  size_t file_index(const std::string& name) const;

  std::string dir_;
  std::string config_path_;
  nlohmann::json config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  bool weightless_ = false;
};

}  // namespace strata
