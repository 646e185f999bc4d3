// Methods of str / dict / list / loop objects, str.format, argument binding and the global
// functions of transformers' environment (range, dict, namespace, raise_exception, ...).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "strata/tokenizer/jinja_interp.h"
#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

namespace {

const char* const kStrMethods[] = {
    "startswith", "endswith",     "strip",       "lstrip",    "rstrip",  "split",      "rsplit",
    "splitlines", "replace",      "upper",       "lower",     "title",   "capitalize", "swapcase",
    "casefold",   "find",         "rfind",       "index",     "rindex",  "count",      "join",
    "format",     "isdigit",      "isdecimal",   "isnumeric", "isalpha", "isalnum",    "isspace",
    "islower",    "isupper",      "zfill",       "center",    "ljust",   "rjust",      "partition",
    "rpartition", "removeprefix", "removesuffix"};
const char* const kDictMethods[] = {"items", "keys", "values", "get", "copy"};
const char* const kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
const char* const kListMethods[] = {"index", "count", "copy"};
const char* const kListUnsafe[] = {"append", "clear",  "extend",  "insert",
                                   "pop",    "remove", "reverse", "sort"};
const char* const kGlobals[] = {"range",        "dict",   "namespace", "raise_exception",
                                "strftime_now", "joiner", "cycler",    "lipsum"};

template <size_t N>
bool among(const char* const (&names)[N], const std::string& name) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

Value method(const Value& self, const std::string& name) {
  auto c = std::make_shared<Callable>();
  c->type = Callable::Type::kMethod;
  c->name = name;
  c->self = self;
  return Value::callable(std::move(c));
}

std::string need_str(const std::optional<Value>& v, const char* fn) {
  if (!v || !v->is_string()) {
    fault(cat("TypeError: ", fn, "() argument must be str, not ", v ? v->type_name() : "nothing"));
  }
  return v->str();
}

std::optional<std::string> opt_str(const std::optional<Value>& v, const char* fn) {
  if (!v || v->is_none()) return std::nullopt;
  return need_str(v, fn);
}

int64_t opt_int(const std::optional<Value>& v, int64_t dflt, const char* fn) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_integral()) {
    fault(cat("TypeError: '", v->type_name(), "' object cannot be interpreted as an integer (", fn,
              ")"));
  }
  return v->as_int();
}

Value str_list(std::vector<std::string> parts) {
  List out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

std::string pad(const std::string& s, int64_t width, char align, const std::string& fill) {
  int64_t len = int64_t(count_code_points(s));
  if (width <= len) return s;
  check_string_size(size_t(width));
  check_string_size(size_t(width) * std::max<size_t>(fill.size(), 1));
  int64_t total = width - len, left = 0;
  if (align == '>') left = total;
  if (align == '^') left = total / 2;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < total; ++i) out += fill;
  return out;
}

// Applies a format spec ([[fill]align][sign][0][width][,][.precision][type]) to a value.
std::string format_field(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  std::u32string u = decode_utf8(spec);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (u.size() >= 2 && is_align(u[1])) {
    fill = encode_utf8(u.substr(0, 1));
    align = char(u[1]);
    i = 2;
  } else if (!u.empty() && is_align(u[0])) {
    align = char(u[0]);
    i = 1;
  }
  std::string rest = encode_utf8(u.substr(i));
  char sign = 0;
  size_t k = 0;
  if (k < rest.size() && (rest[k] == '+' || rest[k] == '-' || rest[k] == ' ')) sign = rest[k++];
  if (k < rest.size() && rest[k] == '0') {
    if (!align) fill = "0", align = '=';
    ++k;
  }
  int64_t width = 0;
  while (k < rest.size() && isdigit(static_cast<unsigned char>(rest[k])) && width < 100000)
    width = width * 10 + (rest[k++] - '0');
  char grouping = 0;
  if (k < rest.size() && (rest[k] == ',' || rest[k] == '_')) grouping = rest[k++];
  int precision = -1;
  if (k < rest.size() && rest[k] == '.') {
    precision = 0;
    ++k;
    while (k < rest.size() && isdigit(static_cast<unsigned char>(rest[k])) && precision < 1000)
      precision = precision * 10 + (rest[k++] - '0');
  }
  char type = k < rest.size() ? rest[k++] : 0;
  if (k != rest.size()) fault(cat("ValueError: Invalid format specifier '", spec, "'"));
  std::string body;
  if (v.is_string() || type == 's') {
    if (!v.is_string()) fault("ValueError: Unknown format code 's' for a non-string value");
    body = v.str();
    if (precision >= 0) {
      std::u32string b = decode_utf8(body);
      if (b.size() > size_t(precision)) body = encode_utf8(b.substr(0, size_t(precision)));
    }
    return pad(body, width, align ? align : '<', fill);
  }
  if (!v.is_number()) return pad(v.to_str(), width, align ? align : '<', fill);
  char buf[512];
  std::string sgn = sign && sign != '-' ? std::string(1, sign) : "";
  if (type == 0 && !v.is_float()) type = 'd';
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b') {
    if (v.is_float())
      fault(cat("ValueError: Unknown format code '", type, "' for object of type 'float'"));
    int64_t n = v.as_int();
    if (type == 'b') {
      uint64_t m = n < 0 ? uint64_t(0) - uint64_t(n) : uint64_t(n);
      std::string bits;
      do bits.insert(bits.begin(), char('0' + (m & 1)));
      while (m >>= 1);
      body = (n < 0 ? "-" : sgn) + bits;
    } else {
      std::snprintf(buf, sizeof buf, (std::string("%") + sgn + "ll" + type).c_str(), (long long)n);
      body = buf;
    }
  } else if (type == 0) {
    body = (v.as_float() >= 0 ? sgn : "") + (precision >= 0 ? [&] {
      std::snprintf(buf, sizeof buf, "%.*g", precision, v.as_float());
      return std::string(buf);
    }() : py_float_repr(v.as_float()));
  } else if (std::string_view("fFeEgG%").find(type) != std::string_view::npos) {
    double d = v.as_float() * (type == '%' ? 100 : 1);
    char t = type == '%' ? 'f' : type;
    std::snprintf(buf, sizeof buf, (std::string("%") + sgn + ".*" + t).c_str(),
                  precision < 0 ? 6 : precision, d);
    body = std::string(buf) + (type == '%' ? "%" : "");
  } else {
    fault(cat("ValueError: Unknown format code '", type, "'"));
  }
  if (grouping) {  // thousands separators in the integer part
    size_t b = body.find_first_of("0123456789");
    size_t e = body.find_first_not_of("0123456789", b == std::string::npos ? body.size() : b);
    if (b != std::string::npos &&
        (type == 'd' || type == 0 ||
         std::string_view("fFeEgG%").find(type) != std::string_view::npos)) {
      if (e == std::string::npos) e = body.size();
      std::string digits = body.substr(b, e - b), grouped;
      for (size_t i = 0; i < digits.size(); ++i) {
        if (i && (digits.size() - i) % 3 == 0) grouped.push_back(grouping);
        grouped.push_back(digits[i]);
      }
      body = body.substr(0, b) + grouped + body.substr(e);
    }
  }
  if (align == '=') {
    size_t sign_len =
        (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
    return body.substr(0, sign_len) +
           pad(body.substr(sign_len), width - int64_t(sign_len), '>', fill);
  }
  return pad(body, width, align ? align : '>', fill);
}

std::string str_format(Interpreter& in, const std::string& fmt, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      fault("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) fault("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty() || isdigit(static_cast<unsigned char>(head[0]))) {
      size_t idx = head.empty() ? auto_index++ : size_t(std::stoul(head.substr(0, 6)));
      if (idx >= args.pos.size()) fault("IndexError: Replacement index out of range");
      v = args.pos[idx];
    } else {
      auto it = std::find_if(args.kw.begin(), args.kw.end(),
                             [&](const auto& p) { return p.first == head; });
      if (it == args.kw.end()) fault(cat("KeyError: '", head, "'"));
      v = it->second;
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        size_t next = field.find_first_of(".[", end + 1);
        v = in.getattr(v, field.substr(end + 1, next == std::string::npos ? std::string::npos
                                                                          : next - end - 1));
        end = next;
      } else {
        size_t rb = field.find(']', end);
        if (rb == std::string::npos) fault("ValueError: Missing ']' in format string");
        std::string key = field.substr(end + 1, rb - end - 1);
        bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = in.getitem(
            v, numeric ? Value::integer(std::stoll(key.substr(0, 18))) : Value::string(key));
        end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
    }
    if (v.is_undefined()) fail_undefined(v);
    if (conv == "r" || conv == "a") {
      v = Value::string(v.repr());
    } else if (conv == "s") {
      v = Value::string(v.to_str());
    } else if (!conv.empty()) {
      fault(cat("ValueError: Unknown conversion specifier ", conv));
    }
    out += format_field(v, spec);
    check_string_size(out.size());
  }
  return out;
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string u = decode_utf8(s);
  return !u.empty() && std::all_of(u.begin(), u.end(), pred);
}

Value call_str_method(Interpreter& in, const Value& self, const std::string& name,
                      const Args& args) {
  const std::string& s = self.str();
  bool mk = self.is_markup();
  if (name == "startswith" || name == "endswith") {
    auto a = args.bind(name.c_str(), {"prefix", "start", "end"}, 1);
    std::string sub = s;
    if ((a[1] && !a[1]->is_none()) || (a[2] && !a[2]->is_none()))
      sub = slice_value(self, a[1] ? *a[1] : Value::none(), a[2] ? *a[2] : Value::none(),
                        Value::none())
                .str();
    List options = a[0]->is_tuple() ? a[0]->items() : List{*a[0]};
    for (const auto& o : options) {
      std::string p = need_str(o, name.c_str());
      bool hit = name == "startswith" ? sub.compare(0, p.size(), p) == 0 && sub.size() >= p.size()
                                      : sub.size() >= p.size() &&
                                            sub.compare(sub.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto a = args.bind(name.c_str(), {"chars"});
    return Value::string(
        py_strip(s, opt_str(a[0], name.c_str()), name != "rstrip", name != "lstrip"), mk);
  }
  if (name == "split" || name == "rsplit") {
    auto a = args.bind(name.c_str(), {"sep", "maxsplit"});
    auto sep = opt_str(a[0], name.c_str());
    int64_t max = opt_int(a[1], -1, name.c_str());
    return str_list(name == "split" ? py_split(s, sep, max) : py_rsplit(s, sep, max));
  }
  if (name == "splitlines") {
    auto a = args.bind("splitlines", {"keepends"});
    return str_list(py_splitlines(s, a[0] && a[0]->truthy()));
  }
  if (name == "replace") {
    auto a = args.bind("replace", {"old", "new", "count"}, 2);
    return Value::string(py_replace(s, need_str(a[0], "replace"), need_str(a[1], "replace"),
                                    opt_int(a[2], -1, "replace")),
                         mk);
  }
  if (name == "upper") return args.bind("upper", {}), Value::string(py_upper(s), mk);
  if (name == "lower" || name == "casefold")
    return args.bind("lower", {}), Value::string(py_lower(s), mk);
  if (name == "title") return args.bind("title", {}), Value::string(py_title(s), mk);
  if (name == "capitalize") return args.bind("capitalize", {}), Value::string(py_capitalize(s), mk);
  if (name == "swapcase") return args.bind("swapcase", {}), Value::string(py_swapcase(s), mk);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    auto a = args.bind(name.c_str(), {"sub", "start", "end"}, 1);
    int64_t start = opt_int(a[1], 0, name.c_str());
    std::string hay = s;
    int64_t offset = 0;
    if (start != 0 || (a[2] && !a[2]->is_none())) {
      int64_t n = int64_t(count_code_points(s));
      offset = start < 0 ? std::max<int64_t>(0, start + n) : std::min(start, n);
      hay = slice_value(self, Value::integer(start), a[2] ? *a[2] : Value::none(), Value::none())
                .str();
    }
    int64_t r = py_find(hay, need_str(a[0], name.c_str()), name[0] == 'r');
    if (r < 0 && name.find("index") != std::string::npos) fault("ValueError: substring not found");
    return Value::integer(r < 0 ? -1 : r + offset);
  }
  if (name == "count") {
    auto a = args.bind("count", {"sub"}, 1);
    return Value::integer(py_count(s, need_str(a[0], "count")));
  }
  if (name == "join") {
    auto a = args.bind("join", {"iterable"}, 1);
    std::string out;
    List items = iterate(*a[0]);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        fault(cat("TypeError: sequence item ", i, ": expected str instance, ", items[i].type_name(),
                  " found"));
      }
      if (i) out += s;
      out += items[i].str();
      check_string_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return Value::string(str_format(in, s, args), mk);
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::boolean(all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::boolean(
        all_chars(s, [](char32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }));
  if (name == "isalnum") {
    return Value::boolean(all_chars(s, [](char32_t c) {
      return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
    }));
  }
  if (name == "isspace") return Value::boolean(all_chars(s, py_isspace));
  if (name == "islower") return Value::boolean(py_islower(s));
  if (name == "isupper") return Value::boolean(py_isupper(s));
  if (name == "zfill") {
    auto a = args.bind("zfill", {"width"}, 1);
    int64_t w = std::max<int64_t>(opt_int(a[0], 0, "zfill"), 0);
    bool neg = !s.empty() && (s[0] == '-' || s[0] == '+');
    std::string body = pad(s.substr(neg ? 1 : 0), w - (neg ? 1 : 0), '>', "0");
    return Value::string((neg ? s.substr(0, 1) : "") + body, mk);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    auto a = args.bind(name.c_str(), {"width", "fillchar"}, 1);
    std::string fill = a[1] ? need_str(a[1], name.c_str()) : " ";
    if (count_code_points(fill) != 1)
      fault("TypeError: The fill character must be exactly one character long");
    char align = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    if (align == '^') {  // str.center puts the odd extra space on the right... unless len is odd
      int64_t w = opt_int(a[0], 0, name.c_str()), len = int64_t(count_code_points(s));
      if (w <= len) return Value::string(s, mk);
      int64_t marg = w - len, left = marg / 2 + (marg & w & 1);
      return Value::string(pad(pad(s, len + left, '>', fill), w, '<', fill), mk);
    }
    return Value::string(pad(s, opt_int(a[0], 0, name.c_str()), align, fill), mk);
  }
  if (name == "partition" || name == "rpartition") {
    auto a = args.bind(name.c_str(), {"sep"}, 1);
    std::string sep = need_str(a[0], name.c_str());
    if (sep.empty()) fault("ValueError: empty separator");
    size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      return name == "partition"
                 ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple({Value::string(s.substr(0, hit)), Value::string(sep),
                         Value::string(s.substr(hit + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto a = args.bind(name.c_str(), {"affix"}, 1);
    std::string p = need_str(a[0], name.c_str());
    if (name == "removeprefix" && s.compare(0, p.size(), p) == 0 && s.size() >= p.size())
      return Value::string(s.substr(p.size()), mk);
    if (name == "removesuffix" && !p.empty() && s.size() >= p.size() &&
        s.compare(s.size() - p.size(), p.size(), p) == 0)
      return Value::string(s.substr(0, s.size() - p.size()), mk);
    return self;
  }
  fault(cat("AttributeError: 'str' object has no attribute '", name, "'"));
}

Value call_loop_method(Interpreter& in, const Value& self, const std::string& name, Args args) {
  LoopState& st = *self.call().loop;
  if (name == "cycle") {
    if (args.pos.empty()) fault("TypeError: no items for cycling given");
    return args.pos[st.index % args.pos.size()];
  }
  // changed(*values): true when the values differ from the previous call's.
  Value current = Value::tuple(args.pos);
  if (st.last_changed && py_equal(*st.last_changed, current)) return Value::boolean(false);
  st.last_changed = current;
  return Value::boolean(true);
}

}  // namespace

std::vector<std::optional<Value>> Args::bind(const char* fn,
                                             std::initializer_list<const char*> names,
                                             size_t required) const {
  std::vector<std::optional<Value>> out(names.size());
  if (pos.size() > names.size()) {
    fault(cat("TypeError: ", fn, "() takes at most ", names.size(), " argument(s) (", pos.size(),
              " given)"));
  }
  for (size_t i = 0; i < pos.size(); ++i) out[i] = pos[i];
  for (const auto& kv : kw) {
    const std::string& k = kv.first;
    const Value& v = kv.second;
    auto it = std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; });
    if (it == names.end())
      fault(cat("TypeError: ", fn, "() got an unexpected keyword argument '", k, "'"));
    size_t idx = size_t(it - names.begin());
    if (out[idx]) fault(cat("TypeError: ", fn, "() got multiple values for argument '", k, "'"));
    out[idx] = v;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!out[i])
      fault(cat("TypeError: ", fn, "() missing required argument '", names.begin()[i], "'"));
  }
  return out;
}

std::optional<Value> find_method(const Value& self, const std::string& name) {
  bool dunder = name.size() > 4 && name.rfind("__", 0) == 0;
  bool has = false, unsafe = dunder;
  if (self.is_string()) {
    has = among(kStrMethods, name);
  } else if (self.is_dict()) {
    has = among(kDictMethods, name);
    unsafe |= among(kDictUnsafe, name);
  } else if (self.is_list()) {
    has = among(kListMethods, name) && name != "copy";
    unsafe |= among(kListUnsafe, name);
  } else if (self.is_tuple()) {
    has = name == "index" || name == "count";
  }
  if (unsafe) {
    return Value::undefined(cat("SecurityError: access to attribute '", name, "' of '",
                                self.type_name(), "' object is unsafe."));
  }
  if (has) return method(self, name);
  return std::nullopt;
}

Value call_method(Interpreter& in, const Callable& m, Args args) {
  const Value& self = m.self;
  const std::string& name = m.name;
  if (self.is_string()) return call_str_method(in, self, name, args);
  if (self.is_callable() && self.call().type == Callable::Type::kLoop)
    return call_loop_method(in, self, name, std::move(args));
  if (self.is_namespace() && name == "__joiner__") {  // joiner() objects
    Dict& st = self.dict();
    bool used = st.find("used") != nullptr;
    st.set(Value::string("used"), Value::boolean(true));
    return used ? *st.find("sep") : Value::string("");
  }
  if (self.is_dict()) {
    const Dict& d = self.dict();
    if (name == "get") {
      auto a = args.bind("get", {"key", "default"}, 1);
      const Value* v = d.find(*a[0]);
      return v ? *v : (a[1] ? *a[1] : Value::none());
    }
    args.bind(name.c_str(), {});
    List out;
    for (const auto& [k, v] : d.entries) {
      if (name == "items") {
        out.push_back(Value::tuple({k, v}));
      } else {
        out.push_back(name == "values" ? v : k);
      }
    }
    if (name == "copy") return Value::dict(std::make_shared<Dict>(d));
    return Value::list(std::move(out));
  }
  if (self.is_sequence()) {
    auto a = args.bind(name.c_str(), {"value"}, 1);
    const List& items = self.items();
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py_equal(items[i], *a[0])) continue;
      if (name == "index") return Value::integer(int64_t(i));
      ++count;
    }
    if (name == "index") fault(cat("ValueError: ", a[0]->repr(), " is not in list"));
    return Value::integer(count);
  }
  fault(cat("AttributeError: '", self.type_name(), "' object has no attribute '", name, "'"));
}

bool is_global(const std::string& name) { return among(kGlobals, name); }

Value global_function(const std::string& name) {
  auto c = std::make_shared<Callable>();
  c->type = Callable::Type::kBuiltin;
  c->name = name;
  return Value::callable(std::move(c));
}

Value call_global(Interpreter& in, const Callable& fn, Args args) {
  const std::string& name = fn.name;
  if (name == "raise_exception") {
    auto a = args.bind("raise_exception", {"message"}, 1);
    throw RaisedError(a[0]->to_str());
  }
  if (name == "range") {
    if (!args.kw.empty()) fault("TypeError: range() takes no keyword arguments");
    if (args.pos.empty() || args.pos.size() > 3)
      fault(cat("TypeError: range expected at most 3 arguments, got ", args.pos.size()));
    for (const auto& v : args.pos) {
      if (!v.is_integral()) {
        fault(cat("TypeError: '", v.type_name(), "' object cannot be interpreted as an integer"));
      }
    }
    int64_t start = 0, stop, step = 1;
    if (args.pos.size() == 1) {
      stop = args.pos[0].as_int();
    } else {
      start = args.pos[0].as_int();
      stop = args.pos[1].as_int();
      if (args.pos.size() == 3) step = args.pos[2].as_int();
    }
    if (step == 0) fault("ValueError: range() arg 3 must not be zero");
    __int128 span = __int128(stop) - start;
    __int128 count = step > 0 ? (span + step - 1) / step : (span + step + 1) / step;
    if (count > 100000) {
      fault(
          "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
          "(100000).");
    }
    List out;
    for (__int128 k = 0; k < count; ++k) out.push_back(Value::integer(int64_t(start + k * step)));
    return Value::list(std::move(out));
  }
  if (name == "dict" || name == "namespace") {
    auto d = std::make_shared<Dict>();
    if (args.pos.size() > 1) {
      fault(cat("TypeError: ", name, " expected at most 1 argument, got ", args.pos.size()));
    }
    if (!args.pos.empty()) {
      const Value& src = args.pos[0];
      if (src.is_dict() || src.is_namespace()) {
        *d = src.dict();
      } else {
        for (const auto& item : iterate(src)) {
          List kv = iterate(item);
          if (kv.size() != 2)
            fault("ValueError: dictionary update sequence element has wrong length");
          d->set(kv[0], kv[1]);
        }
      }
    }
    for (auto& [k, v] : args.kw) d->set(Value::string(k), std::move(v));
    return name == "dict" ? Value::dict(std::move(d)) : in.make_namespace(std::move(d));
  }
  if (name == "strftime_now") {
    auto a = args.bind("strftime_now", {"format"}, 1);
    std::string fmt = need_str(a[0], "strftime_now");
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string out(256 + fmt.size() * 8, '\0');
    size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
    out.resize(n);
    return Value::string(std::move(out));
  }
  if (name == "joiner") {
    auto a = args.bind("joiner", {"sep"});
    auto st = std::make_shared<Dict>();
    st->set(Value::string("sep"), a[0] ? *a[0] : Value::string(", "));
    return method(in.make_namespace(std::move(st)), "__joiner__");
  }
  fault(cat("'", name, "' is not supported by strata's chat templates"));
}

}  // namespace strata::jinja
