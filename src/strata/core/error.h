// strata::Error and the helpers that build its messages.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace strata {

// Every failure that a user can cause (bad files, bad requests, bad flags) is an Error whose
// message names the file, field or tensor at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates anything streamable into one string: cat("layer ", 3, ": bad shape").
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace strata

// Throws strata::Error with the given message parts when cond is false.
#define STRATA_CHECK(cond, ...)                          \
  do {                                                   \
    if (!(cond)) ::strata::fail(__VA_ARGS__);            \
  } while (0)
