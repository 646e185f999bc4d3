// strata::FieldError: an Error about one named input field ("temperature", "logit_bias"), so
// that an API can report the field (OpenAI's error.param) without parsing the message.
#pragma once

#include <string>
#include <utility>

#include "strata/core/error.h"

namespace strata {

class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& what) : Error(what), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace strata

// Throws strata::FieldError naming `field` with the given message parts when cond is false.
#define STRATA_CHECK_FIELD(cond, field, ...)                                      \
  do {                                                                            \
    if (!(cond)) throw ::strata::FieldError((field), ::strata::cat(__VA_ARGS__)); \
  } while (0)
