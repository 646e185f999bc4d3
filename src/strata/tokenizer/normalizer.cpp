#include "strata/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "strata/core/error.h"

namespace strata::tok {

Normalizer::Normalizer(const nlohmann::json& j, const std::string& where) {
  parse(j, where);
  if (!forms_.empty()) icu_require(where);
}

void Normalizer::parse(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    fail(where, ": expected an object with a string \"type\"");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) fail(where, ".normalizers: expected an array");
    for (size_t i = 0; i < it->size(); ++i) parse((*it)[i], cat(where, ".normalizers[", i, "]"));
  } else if (type == "NFC") {
    forms_.push_back(NormForm::kNfc);
  } else if (type == "NFD") {
    forms_.push_back(NormForm::kNfd);
  } else if (type == "NFKC") {
    forms_.push_back(NormForm::kNfkc);
  } else if (type == "NFKD") {
    forms_.push_back(NormForm::kNfkd);
  } else {
    fail(where, ".type: unsupported normalizer '", type, "' (supported: NFC, NFD, NFKC, NFKD, ",
         "Sequence)");
  }
}

std::string_view Normalizer::apply(std::string_view in, std::string* buf) const {
  std::string_view cur = in;
  std::string tmp;
  for (NormForm f : forms_) {
    if (icu_is_normalized_quick(f, cur)) continue;
    icu_normalize_regions(f, cur, &tmp);
    buf->swap(tmp);
    cur = *buf;
  }
  return cur;
}

}  // namespace strata::tok
