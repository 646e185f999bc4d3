#include "strata/server/tool_parser.h"


#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <random>

#include "strata/io/config.h"

#include "strata/server/reasoning_parser.h"

namespace strata::server {

using Json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>",
                           kFunction = "<function=", kFunctionClose = "</function>",
                           kParam = "<parameter=", kParamClose = "</parameter>";
constexpr const char* kSpace = " \t\n\r\f\v";
constexpr size_t kMaxName = 256;  // longer function / parameter names are not names
constexpr int kMaxDepth = 64;     // nesting of a converted value or Hermes body

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  }
  return out;
}

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (s.substr(0, p.size()) == p) return true;
  }
  return false;
}

struct Found {
  size_t pos = std::string::npos;
  std::string_view tag;
};

// The earliest occurrence at or after `from` of any of `tags`.
Found find_first(std::string_view s, size_t from, std::initializer_list<std::string_view> tags) {
  Found f;
  for (std::string_view t : tags) {
    const size_t p = s.find(t, from);
    if (p < f.pos) f = {p, t};
  }
  return f;
}

size_t partial_any(std::string_view s, std::initializer_list<std::string_view> tags) {
  size_t n = 0;
  for (std::string_view t : tags) n = std::max(n, partial_tag_suffix(s, t));
  return n;
}

// Where the next search may start once `s` holds no complete tag of at most `longest` bytes.
size_t rescan_from(std::string_view s, size_t longest) {
  return s.size() >= longest ? s.size() - longest + 1 : 0;
}

// JSON text as Python's json.dumps(..., ensure_ascii=False) writes it (", " and ": "), which is
// what vLLM streams; invalid UTF-8 is replaced rather than thrown on.
void dump(const Json& v, std::string* out) {
  auto scalar = [&](const Json& x) {
    *out += x.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) *out += ", ";
      first = false;
      scalar(Json(key));
      *out += ": ";
      dump(value, out);
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) *out += ", ";
      dump(v[i], out);
    }
    *out += ']';
  } else {
    scalar(v);
  }
}

std::string dump(const Json& v) {
  std::string out;
  dump(v, &out);
  return out;
}

std::optional<Json> parse_json(std::string_view s) {
  if (json_depth(s) > kMaxDepth) return std::nullopt;
  Json j = Json::parse(s.begin(), s.end(), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Python's digit groups: digits with single underscores between them.
bool python_digits(std::string_view s) {
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' ? s[i + 1] == '_' : (s[i] < '0' || s[i] > '9')) return false;
  }
  return true;
}

std::string without_underscores(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out += c;
  }
  return out;
}

std::optional<Json> to_integer(const std::string& digits) {  // digits, maybe after a '-'
  int64_t i;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
  if (ec == std::errc() && p == digits.data() + digits.size()) return Json(i);
  uint64_t u;
  auto [q, ec2] = std::from_chars(digits.data(), digits.data() + digits.size(), u);
  if (ec2 == std::errc() && q == digits.data() + digits.size()) return Json(u);
  return std::nullopt;  // beyond 64 bits
}

// Python's int(s).
std::optional<Json> python_int(std::string_view s) {
  s = trim(s);
  std::string sign;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    if (s[0] == '-') sign = "-";
    s.remove_prefix(1);
  }
  if (!python_digits(s)) return std::nullopt;
  return to_integer(sign + without_underscores(s));
}

// A decimal float literal (Python's float() syntax less inf/nan), without its sign.
bool float_syntax(std::string_view s) {
  const size_t e = s.find_first_of("eE");
  if (e != std::string_view::npos) {
    std::string_view exp = s.substr(e + 1);
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) exp.remove_prefix(1);
    if (!python_digits(exp)) return false;
    s = s.substr(0, e);
  }
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos) return python_digits(s);
  const std::string_view whole = s.substr(0, dot), frac = s.substr(dot + 1);
  if (whole.empty() && frac.empty()) return false;
  return (whole.empty() || python_digits(whole)) && (frac.empty() || python_digits(frac));
}

// A finite double as vLLM returns float(s): an integer when it has no fraction.
Json number_value(double f) {
  if (f == std::trunc(f)) {
    if (std::fabs(f) < 9.2e18) return Json(int64_t(f));
    if (f > 0 && f < 1.8e19) return Json(uint64_t(f));
  }
  return Json(f);
}

// vLLM's float(s) then int-if-integral; inf and nan fail there (int() raises), so here too.
std::optional<Json> python_number(std::string_view s) {
  s = trim(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (!float_syntax(s)) return std::nullopt;
  const std::string text = (negative ? "-" : "") + without_underscores(s);
  double f;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), f);
  if (ec != std::errc() || p != text.data() + text.size() || !std::isfinite(f)) {
    return std::nullopt;
  }
  return number_value(f);
}

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    *out += char(cp);
  } else if (cp < 0x800) {
    *out += char(0xC0 | (cp >> 6));
    *out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += char(0xE0 | (cp >> 12));
    *out += char(0x80 | ((cp >> 6) & 0x3F));
    *out += char(0x80 | (cp & 0x3F));
  } else {
    *out += char(0xF0 | (cp >> 18));
    *out += char(0x80 | ((cp >> 12) & 0x3F));
    *out += char(0x80 | ((cp >> 6) & 0x3F));
    *out += char(0x80 | (cp & 0x3F));
  }
}

// The part of Python's ast.literal_eval that maps onto JSON: None/True/False, decimal numbers
// (with unary signs), '...' and "..." strings (escapes, adjacent ones joined), lists, tuples (as
// arrays) and dicts with string, number, bool or None keys. Anything else fails.
class PyLiteral {
 public:
  explicit PyLiteral(std::string_view s) : s_(s) {}

  std::optional<Json> parse() {
    Json v;
    if (!sequence(&v, '\0', 0)) return std::nullopt;
    return v;
  }

 private:
  void ws() {
    while (i_ < s_.size() && std::string_view(kSpace).find(s_[i_]) != std::string_view::npos) {
      ++i_;
    }
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool at_end() {
    ws();
    return i_ == s_.size();
  }

  // Values up to `close` ('\0': the end): one without a comma is itself, else a tuple.
  bool sequence(Json* out, char close, int depth) {
    Json items = Json::array();
    bool comma = false;
    while (!(close ? eat(close) : at_end())) {
      if (!items.empty() && !comma) return false;
      Json v;
      if (!value(&v, depth)) return false;
      items.push_back(std::move(v));
      comma = eat(',');
    }
    const bool empty = items.empty();
    if (items.size() == 1 && !comma)
      *out = std::move(items[0]);
    else
      *out = std::move(items);
    return close != '\0' || !empty;  // "" is not a literal, "()" is
  }

  bool value(Json* out, int depth) {
    if (depth > kMaxDepth) return false;
    ws();
    if (i_ == s_.size()) return false;
    const char c = s_[i_];
    if (c == '(') return ++i_, sequence(out, ')', depth + 1);
    if (c == '[') return ++i_, list(out, depth + 1);
    if (c == '{') return ++i_, dict(out, depth + 1);
    if (c == '\'' || c == '"' || c == 'u' || c == 'U') {
      if ((c == 'u' || c == 'U') &&
          !(i_ + 1 < s_.size() && (s_[i_ + 1] == '\'' || s_[i_ + 1] == '"'))) {
        return word(out);
      }
      std::string text;
      do {
        if (s_[i_] == 'u' || s_[i_] == 'U') ++i_;
        if (!string(&text)) return false;
        ws();
      } while (i_ < s_.size() && (s_[i_] == '\'' || s_[i_] == '"'));
      *out = std::move(text);
      return true;
    }
    if (c == '-' || c == '+') {
      ++i_;
      if (!value(out, depth + 1) || !out->is_number()) return false;
      if (c == '-') *out = out->is_number_float() ? Json(-out->get<double>()) : negate(*out);
      return !out->is_null();
    }
    if ((c >= '0' && c <= '9') || c == '.') return number(out);
    return word(out);
  }

  static Json negate(const Json& v) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) + 1 ? Json(int64_t(0 - u)) : Json();
    }
    const int64_t i = v.get<int64_t>();
    return i == INT64_MIN ? Json(uint64_t(INT64_MAX) + 1) : Json(-i);
  }

  bool list(Json* out, int depth) {
    *out = Json::array();
    while (!eat(']')) {
      if (!out->empty() && !eat(',')) return false;
      if (eat(']')) return true;
      Json v;
      if (!value(&v, depth)) return false;
      out->push_back(std::move(v));
    }
    return true;
  }

  bool dict(Json* out, int depth) {
    *out = Json::object();
    bool first = true;
    while (!eat('}')) {
      if (!first && !eat(',')) return false;
      if (!first && eat('}')) return true;
      first = false;
      Json key, v;
      if (!value(&key, depth) || !eat(':') || !value(&v, depth)) return false;
      if (key.is_string())
        (*out)[key.get<std::string>()] = std::move(v);
      else if (key.is_primitive())
        (*out)[dump(key)] = std::move(v);  // json.dumps' key rules
      else
        return false;
    }
    return true;
  }

  bool word(Json* out) {
    size_t end = i_;
    while (end < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) {
      ++end;
    }
    const std::string_view w = s_.substr(i_, end - i_);
    if (w == "None")
      *out = nullptr;
    else if (w == "True")
      *out = true;
    else if (w == "False")
      *out = false;
    else
      return false;
    i_ = end;
    return true;
  }

  bool number(Json* out) {
    size_t end = i_;
    while (end < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_' || s_[end] == '.' ||
            ((s_[end] == '+' || s_[end] == '-') && (s_[end - 1] == 'e' || s_[end - 1] == 'E')))) {
      ++end;
    }
    const std::string_view text = s_.substr(i_, end - i_);
    i_ = end;
    if (text.find_first_of(".eE") == std::string_view::npos) {
      // Python rejects leading zeros in a decimal literal ("007").
      if (!python_digits(text) || (text.size() > 1 && text[0] == '0' &&
                                   text.find_first_not_of("0_") != std::string_view::npos)) {
        return false;
      }
      auto v = to_integer(without_underscores(text));
      if (v) *out = std::move(*v);
      return v.has_value();
    }
    if (!float_syntax(text)) return false;
    const std::string clean = without_underscores(text);
    double f;
    auto [p, ec] = std::from_chars(clean.data(), clean.data() + clean.size(), f);
    if (ec != std::errc() || p != clean.data() + clean.size() || !std::isfinite(f)) return false;
    *out = f;
    return true;
  }

  bool hex(size_t digits, uint32_t* cp) {
    *cp = 0;
    for (size_t k = 0; k < digits; ++k, ++i_) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
      const char h = s_[i_];
      *cp = *cp * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return true;
  }

  bool string(std::string* out) {
    const char quote = s_[i_++];
    if (s_.substr(i_, 2) == std::string(2, quote)) return false;  // triple quotes
    while (i_ < s_.size() && s_[i_] != quote) {
      const char c = s_[i_++];
      if (c == '\n') return false;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      static constexpr std::string_view kFrom = "ntrabfv\\'\"", kTo = "\n\t\r\a\b\f\v\\'\"";
      uint32_t cp = 0;
      if (const size_t k = kFrom.find(e); k != std::string_view::npos) {
        *out += kTo[k];
      } else if (e == '\n') {
        // a line continuation
      } else if (e == 'x' || e == 'u' || e == 'U') {
        if (!hex(e == 'x' ? 2 : e == 'u' ? 4 : 8, &cp)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
        append_utf8(out, cp);
      } else if (e >= '0' && e <= '7') {
        cp = uint32_t(e - '0');
        for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k) {
          cp = cp * 8 + uint32_t(s_[i_++] - '0');
        }
        append_utf8(out, cp);
      } else {
        *out += '\\';  // Python keeps unknown escapes as written
        *out += e;
      }
    }
    if (i_ >= s_.size()) return false;
    ++i_;
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::string xml_parameter_type(const Json& schema) {
  if (!schema.is_object()) return "string";
  const auto t = schema.find("type");
  if (t == schema.end()) return "string";
  if (t->is_string()) return t->get<std::string>();
  if (t->is_array()) {
    for (const Json& x : *t) {
      if (x.is_string() && x.get<std::string>() != "null") return x.get<std::string>();
    }
  }
  return dump(*t);
}

ToolParamTypes tool_param_types(const Json& tools) {
  ToolParamTypes out;
  if (!tools.is_array()) return out;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) continue;
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) continue;
    auto& params = out[name->get<std::string>()];
    const auto schema = fn->find("parameters");
    if (schema == fn->end() || !schema->is_object()) continue;
    const auto props = schema->find("properties");
    const Json& properties = props == schema->end() ? *schema : *props;
    if (!properties.is_object()) continue;
    for (const auto& [param, prop] : properties.items()) params[param] = xml_parameter_type(prop);
  }
  return out;
}

Json convert_parameter(const std::string& value, const std::string& type_in) {
  if (lower(value) == "null") return nullptr;
  const std::string type = lower(trim(type_in));
  if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum") {
    return value;
  }
  if (starts_with_any(type, {"int", "uint", "long", "short", "unsigned"})) {
    return python_int(value).value_or(Json(value));
  }
  if (starts_with_any(type, {"num", "float"})) return python_number(value).value_or(Json(value));
  if (type == "boolean" || type == "bool" || type == "binary") return lower(value) == "true";
  if (type == "object" || type == "array" || type == "arr" ||
      starts_with_any(type, {"dict", "list"})) {
    if (auto j = parse_json(value)) return std::move(*j);
  }
  if (auto j = PyLiteral(value).parse()) return std::move(*j);
  return value;
}

std::string make_tool_call_id() {
  static constexpr char kAlnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  thread_local std::mt19937_64 rng((uint64_t(std::random_device{}()) << 32) ^
                                   std::random_device{}());
  std::uniform_int_distribution<int> pick(0, sizeof(kAlnum) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

ToolCallParser::ToolCallParser(ToolParamTypes types) : types_(std::move(types)) {}

ToolCallParser::Delta ToolCallParser::push(std::string_view text) {
  Delta d;
  buf_.append(text);
  while (step(&d, false)) {
  }
  return d;
}

ToolCallParser::Delta ToolCallParser::finish() {
  Delta d;
  while (step(&d, true)) {
  }
  return d;
}

bool ToolCallParser::step(Delta* d, bool at_end) {
  switch (mode_) {
    case Mode::kText:
      return step_text(d, at_end);
    case Mode::kStart:
      return step_start(d, at_end);
    case Mode::kXmlName:
      return step_xml_name(d, at_end);
    case Mode::kXmlBody:
      return step_xml_body(d, at_end);
    case Mode::kXmlParam:
      return step_xml_param(at_end);
    case Mode::kXmlValue:
      return step_xml_value(d, at_end);
    case Mode::kXmlEnd:
      return step_xml_end(at_end);
    case Mode::kHermes:
      return step_hermes(d, at_end);
  }
  return false;
}

bool ToolCallParser::step_text(Delta* d, bool at_end) {
  if (after_call_) {
    const size_t n = buf_.find_first_not_of(kSpace);
    buf_.erase(0, n);  // npos: all of it
    if (buf_.empty()) return false;
    after_call_ = false;
  }
  const size_t open = buf_.find(kCallOpen);
  if (open == std::string::npos) {
    const size_t out = buf_.size() - (at_end ? 0 : partial_tag_suffix(buf_, kCallOpen));
    d->content.append(buf_, 0, out);
    buf_.erase(0, out);
    return false;
  }
  d->content.append(buf_, 0, open);
  buf_.erase(0, open + kCallOpen.size());
  raw_ = kCallOpen;
  mode_ = Mode::kStart;
  return true;
}

bool ToolCallParser::step_start(Delta* d, bool at_end) {
  const size_t n = std::min(buf_.find_first_not_of(kSpace), buf_.size());
  raw_.append(buf_, 0, n);
  buf_.erase(0, n);
  if (buf_.empty() && !at_end) return false;
  if (!buf_.empty() && buf_[0] == '{') {
    mode_ = Mode::kHermes;
    scan_ = 0;
    return true;
  }
  if (buf_.starts_with(kFunction)) {
    raw_ += kFunction;
    buf_.erase(0, kFunction.size());
    mode_ = Mode::kXmlName;
    return true;
  }
  if (!at_end && kFunction.starts_with(buf_)) return false;
  give_back(d);
  return true;
}

bool ToolCallParser::step_xml_name(Delta* d, bool at_end) {
  const size_t end = buf_.find_first_of("<>\n");
  if (end == std::string::npos && buf_.size() <= kMaxName && !at_end) return false;
  if (end == std::string::npos || buf_[end] != '>' || end == 0 || end > kMaxName) {
    give_back(d);  // the name text stays in buf_ and is read as text
    return true;
  }
  const std::string name = buf_.substr(0, end);
  buf_.erase(0, end + 1);
  raw_.clear();
  begin_call(d, name);
  args_out(d, "{");
  mode_ = Mode::kXmlBody;
  return true;
}

bool ToolCallParser::step_xml_body(Delta* d, bool at_end) {
  const Found f = find_first(buf_, 0, {kParam, kFunctionClose, kCallClose});
  if (f.pos == std::string::npos) {  // text between parameters is ignored, as in vLLM
    buf_.erase(
        0, buf_.size() - (at_end ? 0 : partial_any(buf_, {kParam, kFunctionClose, kCallClose})));
    if (!at_end) return false;
    close_xml_call(d);
    return true;
  }
  buf_.erase(0, f.pos + f.tag.size());
  if (f.tag == kParam) {
    mode_ = Mode::kXmlParam;
  } else if (f.tag == kFunctionClose) {
    args_out(d, "}");
    mode_ = Mode::kXmlEnd;
  } else {
    close_xml_call(d);
  }
  return true;
}

bool ToolCallParser::step_xml_param(bool at_end) {
  const size_t end = buf_.find_first_of("<>\n");
  if (end == std::string::npos && buf_.size() <= kMaxName && !at_end) return false;
  if (end == std::string::npos || buf_[end] != '>' || end == 0 || end > kMaxName) {
    mode_ = Mode::kXmlBody;  // not a parameter: skipped like other text between parameters
    return true;
  }
  param_ = buf_.substr(0, end);
  buf_.erase(0, end + 1);
  mode_ = Mode::kXmlValue;
  scan_ = 0;
  return true;
}

bool ToolCallParser::step_xml_value(Delta* d, bool at_end) {
  // As in vLLM, a value also ends where the next parameter, the function or the call begins.
  const Found f = find_first(buf_, scan_, {kParamClose, kParam, kFunctionClose, kCallClose});
  if (f.pos == std::string::npos) {
    if (!at_end) {
      scan_ = rescan_from(buf_, kParamClose.size());
      return false;
    }
    // Cut off: the value as far as it got, less a partial closing tag.
    buf_.resize(buf_.size() - partial_any(buf_, {kParamClose, kParam, kFunctionClose, kCallClose}));
    xml_parameter(d, std::move(buf_));
    buf_.clear();
  } else {
    xml_parameter(d, buf_.substr(0, f.pos));
    buf_.erase(0, f.pos + (f.tag == kParamClose ? f.tag.size() : 0));
  }
  mode_ = Mode::kXmlBody;
  return true;
}

bool ToolCallParser::step_xml_end(bool at_end) {
  const size_t close = buf_.find(kCallClose);
  if (close == std::string::npos) {  // text between </function> and </tool_call> is ignored
    buf_.erase(0, buf_.size() - (at_end ? 0 : partial_tag_suffix(buf_, kCallClose)));
    if (!at_end) return false;
  } else {
    buf_.erase(0, close + kCallClose.size());
  }
  mode_ = Mode::kText;
  after_call_ = true;
  return true;
}

bool ToolCallParser::step_hermes(Delta* d, bool at_end) {
  size_t close = buf_.find(kCallClose, scan_);
  if (close == std::string::npos) {
    if (!at_end) {
      scan_ = rescan_from(buf_, kCallClose.size());
      return false;
    }
    close = buf_.size() - partial_tag_suffix(buf_, kCallClose);
  }
  const size_t consumed = std::min(close + kCallClose.size(), buf_.size());
  // {"name": "...", "arguments": {...}} (or "parameters"; arguments may be a JSON string).
  std::optional<Json> call = parse_json(std::string_view(buf_).substr(0, close));
  const Json* name = nullptr;
  std::optional<Json> args;
  if (call && call->is_object()) {
    auto n = call->find("name");
    if (n != call->end() && n->is_string() && !n->get<std::string>().empty()) name = &*n;
    auto a = call->find("arguments");
    if (a == call->end()) a = call->find("parameters");
    if (a == call->end() || a->is_null())
      args = Json::object();
    else if (a->is_string())
      args = parse_json(a->get<std::string>());
    else
      args = *a;
  }
  if (name && args && args->is_object()) {
    begin_call(d, name->get<std::string>());
    args_out(d, dump(*args));
    raw_.clear();
    mode_ = Mode::kText;
    after_call_ = true;
  } else {
    raw_.append(buf_, 0, consumed);
    give_back(d);
  }
  buf_.erase(0, consumed);
  return true;
}

void ToolCallParser::begin_call(Delta* d, const std::string& name) {
  name_ = name;
  params_ = 0;
  ToolCallDelta header;
  header.index = num_calls_++;
  header.id = make_tool_call_id();
  header.name = name;
  d->calls.push_back(std::move(header));
}

void ToolCallParser::args_out(Delta* d, const std::string& fragment) {
  const int index = num_calls_ - 1;
  if (!d->calls.empty() && d->calls.back().index == index && d->calls.back().id.empty()) {
    d->calls.back().arguments += fragment;
    return;
  }
  ToolCallDelta delta;
  delta.index = index;
  delta.arguments = fragment;
  d->calls.push_back(std::move(delta));
}

void ToolCallParser::xml_parameter(Delta* d, std::string value) {
  if (value.starts_with('\n')) value.erase(0, 1);
  if (value.ends_with('\n')) value.pop_back();
  std::string type = "string";
  if (auto fn = types_.find(name_); fn != types_.end()) {
    if (auto p = fn->second.find(param_); p != fn->second.end()) type = p->second;
  }
  std::string fragment = params_++ ? ", " : "";
  fragment += dump(Json(param_)) + ": " + dump(convert_parameter(value, type));
  args_out(d, fragment);
}

void ToolCallParser::close_xml_call(Delta* d) {
  args_out(d, "}");
  mode_ = Mode::kText;
  after_call_ = true;
}

void ToolCallParser::give_back(Delta* d) {
  d->content += raw_;
  raw_.clear();
  mode_ = Mode::kText;
}

}  // namespace strata::server
