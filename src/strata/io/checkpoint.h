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
  // Opens DIR: reads DIR/config.json, then DIR/model.safetensors.index.json (sharded) or every
  // DIR/*.safetensors. Every weight_map entry must point at an existing shard that holds that
  // tensor. Throws Error naming the file at fault.
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }  // config.json as written

  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws "missing tensor NAME in DIR"
  Tensor get(const std::string& name) const;              // zero-copy view, any dtype
  std::vector<std::string> names() const;                 // sorted
  // The file that holds `name` (for error messages).
  const std::string& file_of(const std::string& name) const;

 private:
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace strata
