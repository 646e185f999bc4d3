// Python operators for Jinja values: arithmetic, comparisons, `in`, slicing, iteration and
// printf-style "%" formatting.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/tokenizer/jinja_interp.h"
#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

namespace {

[[noreturn]] void overflow() {
  fault("OverflowError: integer overflow (strata uses 64-bit integers)");
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fault(cat("TypeError: unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '",
            b.type_name(), "'"));
}

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) {
    if (seq.is_string()) return Value::string("", seq.is_markup());
    return seq.is_tuple() ? Value::tuple({}) : Value::list({});
  }
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty()) check_string_size(s.size() * size_t(std::min<int64_t>(n, INT32_MAX)));
    std::string out;
    for (int64_t i = 0; i < n && !s.empty(); ++i) out += s;
    return Value::string(std::move(out), seq.is_markup());
  }
  const List& items = seq.items();
  if (!items.empty()) check_list_size(items.size() * size_t(std::min<int64_t>(n, INT32_MAX)));
  List out;
  for (int64_t i = 0; i < n && !items.empty(); ++i)
    out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// Python's float floor division and modulo.
void float_divmod(double a, double b, double* div_out, double* mod_out) {
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  *div_out = floordiv;
  *mod_out = mod;
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    }
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return Value::integer(result);
}

bool orderable(const Value& a, const Value& b) {
  return (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
         (a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple());
}

}  // namespace

std::string undefined_message(const Value& undef) {
  return undef.str().empty() ? "undefined" : undef.str();
}

void fail_undefined(const Value& undef) {
  std::string msg = undefined_message(undef);
  if (msg.rfind("SecurityError:", 0) == 0) fault(msg);
  fault("UndefinedError: " + msg);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool nums = a.is_number() && b.is_number();
  bool floats = nums && (a.is_float() || b.is_float());
  if (op == "+") {
    if (floats) return Value::number(a.as_float() + b.as_float());
    if (nums) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (a.is_string() && b.is_string()) {
      bool markup = a.is_markup() || b.is_markup();
      std::string l = markup && !a.is_markup() ? html_escape(a.str()) : a.str();
      std::string r = markup && !b.is_markup() ? html_escape(b.str()) : b.str();
      check_string_size(l.size() + r.size());
      return Value::string(l + r, markup);
    }
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() || a.is_list() || a.is_tuple()) {
      fault(cat("TypeError: can only concatenate ", a.is_string() ? "str" : a.type_name(),
                " (not \"", b.type_name(), "\") to ", a.is_string() ? "str" : a.type_name()));
    }
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (floats) return Value::number(a.as_float() - b.as_float());
    if (!nums) unsupported("-", a, b);
    int64_t r;
    if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
    return Value::integer(r);
  }
  if (op == "*") {
    if (floats) return Value::number(a.as_float() * b.as_float());
    if (nums) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    bool a_seq = a.is_string() || a.is_sequence(), b_seq = b.is_string() || b.is_sequence();
    if (a_seq && b.is_integral()) return repeat(a, b.as_int());
    if (b_seq && a.is_integral()) return repeat(b, a.as_int());
    if (a_seq || b_seq) {
      fault(cat("TypeError: can't multiply sequence by non-int of type '",
                (a_seq ? b : a).type_name(), "'"));
    }
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_float() == 0) fault("ZeroDivisionError: division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (op == "//" || (op == "%" && nums)) {
    if (!nums) unsupported(op, a, b);
    if (floats) {
      if (b.as_float() == 0) {
        fault(op == "//" ? "ZeroDivisionError: float floor division by zero"
                         : "ZeroDivisionError: float modulo");
      }
      double d, m;
      float_divmod(a.as_float(), b.as_float(), &d, &m);
      return Value::number(op == "//" ? d : m);
    }
    int64_t x = a.as_int(), y = b.as_int();
    if (y == 0) fault("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) {
      if (op == "//") overflow();
      return Value::integer(0);
    }
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {
      q -= 1;
      r += y;
    }
    return Value::integer(op == "//" ? q : r);
  }
  if (op == "%") {
    if (a.is_string()) return Value::string(printf_format(a.str(), b), a.is_markup());
    unsupported("%", a, b);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (!floats && b.as_int() >= 0) return int_pow(a.as_int(), b.as_int());
    double x = a.as_float(), y = b.as_float();
    if (x == 0 && y < 0) fault("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) fault("ValueError: complex results are not supported");
    return Value::number(std::pow(x, y));
  }
  fault("unknown operator " + op);
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (!orderable(a, b)) {
    fault(cat("TypeError: '", op, "' not supported between instances of '", a.type_name(),
              "' and '", b.type_name(), "'"));
  }
  int c = py_compare(a, b);
  if (c == 2) return false;  // NaN
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        fault(cat("TypeError: 'in <string>' requires string as left operand, not ",
                  item.type_name()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      charge_steps(int64_t(container.items().size() >> 4));
      for (const auto& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict())
        fault(cat("TypeError: unhashable type: '", item.type_name(), "'"));
      return container.dict().find(item) != nullptr;
    default:
      fault(cat("TypeError: argument of type '", container.type_name(), "' is not iterable"));
  }
}

Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  auto undefined = [&] {
    return Value::undefined(cat(obj.type_repr(), " has no element slice(", start.repr(), ", ",
                                stop.repr(), ", ", step.repr(), ")"));
  };
  if (!(obj.is_string() || obj.is_sequence())) return undefined();
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_integral()) return undefined();
  int64_t st = step.is_none() ? 1 : step.as_int();
  if (st == 0) fault("ValueError: slice step cannot be zero");
  std::u32string chars;
  int64_t n;
  if (obj.is_string()) {
    chars = decode_utf8(obj.str());
    n = int64_t(chars.size());
  } else {
    n = int64_t(obj.items().size());
  }
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (v.is_none()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  st = std::clamp<int64_t>(st, -(n + 1), n + 1);  // a larger step selects the same items
  int64_t b = adjust(start, st < 0 ? n - 1 : 0);
  int64_t e = adjust(stop, st < 0 ? -1 : n);
  std::vector<int64_t> idx;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) idx.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) idx.push_back(i);
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(chars[size_t(i)]);
    return Value::string(encode_utf8(out), obj.is_markup());
  }
  List out;
  for (int64_t i : idx) out.push_back(obj.items()[size_t(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple: charge_steps(int64_t(v.items().size() >> 4)); return v.items();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, val] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      check_list_size(count_code_points(v.str()));
      charge_steps(int64_t(v.str().size() >> 4));
      for (char32_t c : decode_utf8(v.str())) chars.push_back(Value::string(encode_utf8({&c, 1})));
      return chars;
    }
    default: fault(cat("TypeError: '", v.type_name(), "' object is not iterable"));
  }
}

std::string printf_format(const std::string& fmt, const Value& args) {
  List positional;
  const Dict* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else if (args.is_dict()) {
    mapping = &args.dict();
    positional = {args};
  } else {
    positional = {args};
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fault("ValueError: incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos) fault("ValueError: incomplete format key");
      if (!mapping) fault("TypeError: format requires a mapping");
      const Value* v = mapping->find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!v) fault(cat("KeyError: '", fmt.substr(i + 1, close - i - 1), "'"));
      arg = v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ #0").find(fmt[i]) != std::string_view::npos)
      flags.push_back(fmt[i++]);
    std::string width, prec;
    while (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i]))) width.push_back(fmt[i++]);
    bool has_prec = false;
    if (i < fmt.size() && fmt[i] == '.') {
      has_prec = true;
      ++i;
      while (i < fmt.size() && isdigit(static_cast<unsigned char>(fmt[i])))
        prec.push_back(fmt[i++]);
    }
    while (i < fmt.size() && (fmt[i] == 'l' || fmt[i] == 'h' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fault("ValueError: incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (width.size() > 6 || prec.size() > 6) fault("ValueError: format width too large");
    if (!arg) {
      if (next >= positional.size()) fault("TypeError: not enough arguments for format string");
      arg = &positional[next++];
    }
    std::string spec = "%" + flags + width + (has_prec ? "." + prec : "");
    char buf[512];
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = conv == 's' ? arg->to_str() : arg->repr();
        if (has_prec) {
          std::u32string u = decode_utf8(s);
          size_t p = size_t(std::stoul(prec.empty() ? "0" : prec));
          if (u.size() > p) s = encode_utf8(u.substr(0, p));
        }
        size_t w = width.empty() ? 0 : size_t(std::stoul(width));
        size_t len = count_code_points(s);
        if (len < w) {
          std::string pad(w - len, ' ');
          s = flags.find('-') != std::string::npos ? s + pad : pad + s;
        }
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o':
      case 'c': {
        if (!arg->is_number()) {
          fault(cat("TypeError: %", conv, " format: a real number is required, not ",
                    arg->type_name()));
        }
        if (arg->is_float() && !(std::fabs(arg->as_float()) < 9.2e18))
          fault("OverflowError: cannot convert float to integer");
        int64_t v = arg->is_float() ? int64_t(arg->as_float()) : arg->as_int();
        if (conv == 'c') {
          append_utf8(out, char32_t(v));
          break;
        }
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof buf, (spec + "ll" + c).c_str(), (long long)v);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg->is_number()) {
          fault(cat("TypeError: must be real number, not ", arg->type_name()));
        }
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg->as_float());
        out += buf;
        break;
      }
      default: fault(cat("ValueError: unsupported format character '", conv, "'"));
    }
    check_string_size(out.size());
  }
  if (!used_mapping && !mapping && next < positional.size())
    fault("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace strata::jinja
