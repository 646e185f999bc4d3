// Text helpers with Python str semantics over UTF-8: code-point indexing, whitespace, strip,
// split, case mapping (ASCII, Latin, Greek, Cyrillic), repr() quoting and float repr().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::jinja {

// Decodes UTF-8 leniently: a malformed byte becomes its own code point (0xDC80 + byte, like
// Python's surrogateescape) so that encode(decode(s)) == s for any bytes.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
bool valid_utf8(std::string_view s, size_t* bad_offset = nullptr);
size_t count_code_points(std::string_view s);
bool is_ascii(std::string_view s);

bool py_isspace(char32_t c);  // str.isspace() for one code point
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);  // faults on an empty separator
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);  // code-point index
int64_t py_count(std::string_view s, std::string_view sub);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_swapcase(std::string_view s);
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

std::string py_repr_str(std::string_view s);  // 'text' with Python's quoting rules
std::string py_float_repr(double d);          // repr(float)
std::string json_escape_str(std::string_view s, bool ensure_ascii);  // with the quotes

// Python string literal escapes as jinja's lexer applies them ("unicode-escape").
// Returns false and sets *error on a malformed escape.
bool decode_string_escapes(std::string_view body, std::string* out, std::string* error);

// Parses an int the way Python's int(str, base) does (whitespace, sign, underscores).
std::optional<int64_t> parse_py_int(std::string_view s, int base);
std::optional<double> parse_py_float(std::string_view s);

}  // namespace strata::jinja
