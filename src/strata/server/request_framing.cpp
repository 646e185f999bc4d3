#include "strata/server/request_framing.h"

#include <string>

#include "strata/core/error.h"

namespace strata::server {

std::string body_too_large_message(size_t max_body_bytes) {
  return cat("the request body is over the limit of ", max_body_bytes, " bytes (--max-body-bytes)");
}

std::optional<ApiError> check_request_framing(const httplib::Request& req, size_t max_body_bytes) {
  const std::string& m = req.method;
  if (m != "POST" && m != "PUT" && m != "PATCH" && m != "DELETE") return std::nullopt;
  if (req.has_header("Transfer-Encoding")) {
    return ApiError(411, "chunked request bodies are not accepted: send a Content-Length header",
                    "Content-Length");
  }
  const size_t copies = req.get_header_value_count("Content-Length");
  if (copies == 0) {
    return ApiError(411, cat("a ", m, " request needs a Content-Length header"), "Content-Length");
  }
  const std::string value = req.get_header_value("Content-Length");
  for (size_t i = 1; i < copies; ++i) {
    if (req.get_header_value("Content-Length", i) != value) {
      return ApiError(400, "the Content-Length headers disagree", "Content-Length");
    }
  }
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) {
    return ApiError(400, cat("Content-Length '", value, "' is not a byte count"), "Content-Length");
  }
  const size_t digits = value.size() - std::min(value.find_first_not_of('0'), value.size());
  const std::string limit = std::to_string(max_body_bytes);
  const std::string significant = value.substr(value.size() - digits);
  if (digits > limit.size() || (digits == limit.size() && significant > limit)) {
    return ApiError(413, body_too_large_message(max_body_bytes), "Content-Length");
  }
  return std::nullopt;
}

}  // namespace strata::server
