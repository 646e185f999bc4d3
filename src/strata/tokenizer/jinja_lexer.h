// Jinja lexer with the settings transformers uses: trim_blocks, lstrip_blocks, the default
// delimiters, newline normalisation and dropping one trailing newline.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja {

enum class Tok : uint8_t {
  kText,        // template data between tags (whitespace control already applied)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // text holds the operator
  kEof,
};

struct Token {
  Tok type;
  std::string text;
  int line = 0;
  int col = 0;
  int64_t ival = 0;
  double fval = 0;
};

const char* token_desc(Tok t);  // "end of print statement", ...

// Splits a template into tokens; throws strata::Error naming line and column on bad syntax.
std::vector<Token> lex_template(std::string_view source);

// "chat template line L, column C: message"
[[noreturn]] void syntax_error(int line, int col, const std::string& message);

}  // namespace strata::jinja
