// A Jinja2-subset template engine that renders chat templates exactly as transformers does
// (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols and
// transformers' tojson / raise_exception / strftime_now).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "strata/tokenizer/jinja_value.h"

namespace strata::jinja {

struct Program;

class Template {
 public:
  // Throws strata::Error naming the line and column of unsupported or malformed syntax.
  static Template compile(std::string_view source, const Limits& limits = {});

  // Renders with the members of a JSON object as variables. Errors are strata::Error (with the
  // template line), or RaisedError carrying exactly the message of raise_exception().
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const Dict& context) const;

 private:
  std::shared_ptr<const Program> program_;
  Limits limits_;
};

}  // namespace strata::jinja
