// Normalizers of tokenizer.json: NFC, NFD, NFKC, NFKD (through ICU), Sequence, and none.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tokenizer/icu.h"

namespace strata::tok {

class Normalizer {
 public:
  Normalizer() = default;
  // Parses a "normalizer" value (null allowed); `where` prefixes error messages.
  Normalizer(const nlohmann::json& j, const std::string& where);

  bool identity() const { return forms_.empty(); }
  // Returns `in` itself when nothing changes, else a view of *buf holding the result.
  std::string_view apply(std::string_view in, std::string* buf) const;

 private:
  void parse(const nlohmann::json& j, const std::string& where);
  std::vector<NormForm> forms_;
};

}  // namespace strata::tok
