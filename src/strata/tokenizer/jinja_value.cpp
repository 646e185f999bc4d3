// Jinja values with Python semantics (see jinja_value.h).
#include "strata/tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>

#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

namespace {

thread_local const Limits* g_limits = nullptr;
thread_local int64_t g_steps = 0;
const Limits kDefaultLimits;
constexpr int kMaxNesting = 256;  // repr / json / comparison depth (cycles, deep data)

const Limits& limits() { return g_limits ? *g_limits : kDefaultLimits; }

void check_depth(int depth) {
  if (depth > kMaxNesting) fault("RecursionError: maximum nesting depth exceeded");
}

void repr_into(const Value& v, std::string& out, int depth);

void repr_items(const List& items, std::string& out, int depth, char open, char close, bool tuple) {
  out.push_back(open);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(items[i], out, depth + 1);
    check_string_size(out.size());
  }
  if (tuple && items.size() == 1) out.push_back(',');
  out.push_back(close);
}

void repr_dict(const Dict& d, std::string& out, int depth) {
  out.push_back('{');
  for (size_t i = 0; i < d.entries.size(); ++i) {
    if (i) out += ", ";
    repr_into(d.entries[i].first, out, depth + 1);
    out += ": ";
    repr_into(d.entries[i].second, out, depth + 1);
    check_string_size(out.size());
  }
  out.push_back('}');
}

void repr_into(const Value& v, std::string& out, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kString:
      out += v.is_markup() ? "Markup(" + py_repr_str(v.str()) + ")" : py_repr_str(v.str());
      break;
    case Value::Kind::kList: repr_items(v.items(), out, depth, '[', ']', false); break;
    case Value::Kind::kTuple: repr_items(v.items(), out, depth, '(', ')', true); break;
    case Value::Kind::kDict: repr_dict(v.dict(), out, depth); break;
    case Value::Kind::kNamespace:
      out += "<Namespace ";
      repr_dict(v.dict(), out, depth);
      out += ">";
      break;
    case Value::Kind::kUndefined: out += "Undefined"; break;
    default: out += v.to_str();
  }
}

void json_into(const Value& v, const JsonOptions& o, std::string& out, int depth) {
  check_depth(depth);
  check_string_size(out.size());
  auto newline = [&](int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += py_float_repr(d);
      }
      return;
    }
    case Value::Kind::kString: out += json_escape_str(v.str(), o.ensure_ascii); return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.has_indent) newline(depth + 1);
        json_into(items[i], o, out, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Kind::kDict: {
      const Dict& d = v.dict();
      if (d.entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : d.entries) {
        std::string key;
        if (k.is_string()) {
          key = k.str();
        } else if (k.is_number() || k.is_none()) {
          std::string tmp;
          json_into(k, o, tmp, depth + 1);
          key = tmp;
        } else {
          fault(cat("TypeError: keys must be str, int, float, bool or None, not ", k.type_name()));
        }
        entries.emplace_back(std::move(key), &val);
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.has_indent) newline(depth + 1);
        out += json_escape_str(entries[i].first, o.ensure_ascii);
        out += o.key_sep;
        json_into(*entries[i].second, o, out, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out.push_back('}');
      return;
    }
    default:
      fault(cat("TypeError: Object of type ",
                v.is_undefined()   ? "Undefined"
                : v.is_namespace() ? "Namespace"
                                   : v.type_name(),
                " is not JSON serializable"));
  }
}

}  // namespace

void fault(std::string message) { throw Fault{std::move(message)}; }

void check_string_size(size_t bytes) {
  if (bytes > limits().max_string_bytes) fault("MemoryError: string exceeds the render limit");
}

void check_list_size(size_t items) {
  if (items > limits().max_list_items) fault("MemoryError: list exceeds the render limit");
}

void charge_steps(int64_t steps) {
  g_steps += steps;
  if (g_steps > limits().max_steps) fault("render step limit exceeded");
}

void reset_steps() { g_steps = 0; }

const Limits* set_active_limits(const Limits* l) {
  const Limits* prev = g_limits;
  g_limits = l;
  return prev;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.data_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = d;
  return v;
}

Value Value::string(std::string s, bool markup) {
  check_string_size(s.size());
  if (s.size() >= 1024) charge_steps(int64_t(s.size() >> 10));
  Value v;
  v.kind_ = Kind::kString;
  v.markup_ = markup;
  v.data_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(List items) { return list_ptr(std::make_shared<const List>(std::move(items))); }
Value Value::tuple(List items) {
  return list_ptr(std::make_shared<const List>(std::move(items)), true);
}

Value Value::list_ptr(ListPtr items, bool tuple) {
  check_list_size(items->size());
  if (items->size() >= 16) charge_steps(int64_t(items->size() >> 4));
  Value v;
  v.kind_ = tuple ? Kind::kTuple : Kind::kList;
  v.data_ = std::move(items);
  return v;
}

Value Value::dict(DictPtr d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::move(d);
  return v;
}

Value Value::new_dict() { return dict(std::make_shared<Dict>()); }

Value Value::namespace_(DictPtr attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = std::move(attrs);
  return v;
}

Value Value::callable(CallablePtr c) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(c);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) return number(double(u));  // beyond 64-bit ints
      return integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d->set(string(k), from_json(e));
      return dict(std::move(d));
    }
    default: return undefined();
  }
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  if (kind_ != Kind::kInt) {
    fault(cat("TypeError: '", type_name(), "' object cannot be interpreted as an integer"));
  }
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  if (kind_ != Kind::kInt && kind_ != Kind::kBool)
    fault(cat("TypeError: must be real number, not ", type_name()));
  return double(as_int());
}

bool Value::as_bool() const {
  if (kind_ != Kind::kBool) return truthy();
  return std::get<bool>(data_);
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  if (auto p = std::get_if<std::shared_ptr<const std::string>>(&data_)) return **p;
  return kEmpty;
}

// The accessors below are only called after a kind check; a mismatch is a bug in the
// interpreter, reported as a template error rather than an uncaught bad_variant_access.
template <class T, class V>
const T& checked_get(const V& data, const char* what) {
  if (auto p = std::get_if<T>(&data)) return *p;
  fault(cat("internal error: value is not a ", what));
}

const List& Value::items() const { return *checked_get<ListPtr>(data_, "list"); }
const ListPtr& Value::items_ptr() const { return checked_get<ListPtr>(data_, "list"); }
Dict& Value::dict() const { return *checked_get<DictPtr>(data_, "dict"); }
const DictPtr& Value::dict_ptr() const { return checked_get<DictPtr>(data_, "dict"); }
Callable& Value::call() const { return *checked_get<CallablePtr>(data_, "callable"); }
const CallablePtr& Value::call_ptr() const { return checked_get<CallablePtr>(data_, "callable"); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !str().empty();
    case Kind::kList:
    case Kind::kTuple: return !items().empty();
    case Kind::kDict: return dict().size() > 0;
    default: return true;
  }
}

std::string Value::to_str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return py_float_repr(as_float());
    case Kind::kString: return str();
    case Kind::kCallable: {
      const Callable& c = call();
      switch (c.type) {
        case Callable::Type::kMacro: return "<Macro '" + c.name + "'>";
        case Callable::Type::kLoop: return "<LoopContext>";
        case Callable::Type::kMethod:
          return "<built-in method " + c.name + " of " + c.self.type_name() + " object>";
        default: return "<built-in function " + c.name + ">";
      }
    }
    default: {
      std::string out;
      repr_into(*this, out, 0);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(*this, out, 0);
  return out;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return is_markup() ? "Markup" : "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: {
      switch (call().type) {
        case Callable::Type::kMacro: return "Macro";
        case Callable::Type::kLoop: return "LoopContext";
        case Callable::Type::kMethod: return "builtin_function_or_method";
        default: return "function";
      }
    }
  }
  return "object";
}

std::string Value::type_repr() const {
  if (is_none()) return "None";
  if (is_namespace()) return "jinja2.utils.Namespace object";
  if (is_markup()) return "markupsafe.Markup object";
  return std::string(type_name()) + " object";
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : entries)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

namespace {

bool equal_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const List& x = a.items();
      const List& y = b.items();
      if (x.size() != y.size()) return false;
      charge_steps(int64_t(x.size() >> 4));
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal_impl(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (!w || !equal_impl(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return a.dict_ptr() == b.dict_ptr();
    case Value::Kind::kCallable: return a.call_ptr() == b.call_ptr();
    default: return false;
  }
}

int compare_impl(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      if (std::isnan(x) || std::isnan(y)) return 2;  // unordered: every comparison is false
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
    const List& x = a.items();
    const List& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal_impl(x[i], y[i], depth + 1)) continue;
      return compare_impl(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fault(cat("TypeError: '<' not supported between instances of '", a.type_name(), "' and '",
            b.type_name(), "'"));
}

}  // namespace

bool py_equal(const Value& a, const Value& b) { return equal_impl(a, b, 0); }
int py_compare(const Value& a, const Value& b) { return compare_impl(a, b, 0); }

bool py_identical(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.as_bool() == b.as_bool();
    case Value::Kind::kInt: return a.as_int() == b.as_int();
    case Value::Kind::kFloat: return a.as_float() == b.as_float();
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple: return a.items_ptr() == b.items_ptr();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return a.dict_ptr() == b.dict_ptr();
    case Value::Kind::kCallable: return a.call_ptr() == b.call_ptr();
  }
  return false;
}

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_into(v, opts, out, 0);
  return out;
}

}  // namespace strata::jinja
