// The framing of a request body, checked before it is read: a body needs one well-formed
// Content-Length within the limit (chunked uploads are refused), so that a bad length is
// answered at once instead of leaving the connection waiting for bytes that never come.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <optional>

#include "strata/server/api_error.h"

namespace strata::server {

// 411 without Content-Length (or with Transfer-Encoding), 400 when it is not a byte count or
// the copies disagree, 413 over max_body_bytes; nullopt when the body may be read.
std::optional<ApiError> check_request_framing(const httplib::Request& req, size_t max_body_bytes);

// The 413 message, shared with httplib's own 413.
std::string body_too_large_message(size_t max_body_bytes);

}  // namespace strata::server
