// Jinja parser: tokens to a Program, following jinja2's grammar and precedence.
#pragma once

#include <memory>
#include <string_view>

#include "strata/tokenizer/jinja_ast.h"

namespace strata::jinja {

// Lexes and parses; throws strata::Error with the template line and column on bad or
// unsupported syntax (unknown tags, include/import/extends, call blocks, unclosed blocks).
std::unique_ptr<Program> parse_template(std::string_view source, const Limits& limits);

}  // namespace strata::jinja
