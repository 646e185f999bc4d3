// The errors the API answers with, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace strata::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "")
      : std::runtime_error(message),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)),
        type_(type.empty() ? default_type(status) : std::move(type)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }

  nlohmann::json body() const {
    nlohmann::json e = {{"message", what()}, {"type", type_}, {"param", nullptr},
                        {"code", nullptr}};
    if (!param_.empty()) e["param"] = param_;
    if (!code_.empty()) e["code"] = code_;
    return {{"error", e}};
  }

  static std::string default_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
  }

 private:
  int status_;
  std::string param_, code_, type_;
};

// 400 naming the request field at fault.
inline ApiError bad_request(const std::string& message, const std::string& param = "") {
  return ApiError(400, message, param);
}

}  // namespace strata::server
