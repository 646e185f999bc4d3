// Jinja filters and tests, as jinja2 3.1 defines them, with transformers' tojson override.
#include <algorithm>
#include <cmath>

#include "strata/tokenizer/jinja_interp.h"
#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

namespace {

const char* const kUnsupportedFilters[] = {"groupby",        "slice",  "striptags", "truncate",
                                           "urlencode",      "urlize", "wordwrap",  "xmlattr",
                                           "filesizeformat", "random"};

// Lower-cases strings for the case-insensitive comparisons of sort/unique/min/max/dictsort.
Value fold_case(const Value& v, bool case_sensitive) {
  if (case_sensitive || !v.is_string()) return v;
  return Value::string(py_lower(v.str()));
}

// Jinja's make_attrgetter: "a.b.0" looked up with getitem (item first, then attribute).
Value get_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.is_integral()) return in.getitem(item, attribute);
  Value v = item;
  for (const auto& part : py_split(attribute.to_str(), std::string("."), -1)) {
    auto idx = parse_py_int(part, 10);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = in.getitem(v, digits && idx ? Value::integer(*idx) : Value::string(part));
  }
  return v;
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return int64_t(count_code_points(v.str()));
    case Value::Kind::kList:
    case Value::Kind::kTuple: return int64_t(v.items().size());
    case Value::Kind::kDict: return int64_t(v.dict().size());
    default: fault(cat("TypeError: object of type '", v.type_name(), "' has no len()"));
  }
}

std::optional<bool> opt_bool(const std::optional<Value>& v) {
  if (!v) return std::nullopt;
  return v->truthy();
}

// Sorts values by a key with Python's stable sort.
void sort_by_key(List& items, std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return compare_op("<", keys[reverse ? b : a], keys[reverse ? a : b]);
  });
  List sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

Value select_impl(Interpreter& in, const Value& input, Args args, bool with_attr, bool keep) {
  List items = iterate(input);
  Value attr;
  if (with_attr) {
    if (args.pos.empty()) fault("TypeError: Missing parameter for attribute name");
    attr = args.pos[0];
    args.pos.erase(args.pos.begin());
  }
  std::string test_name;
  if (!args.pos.empty()) {
    test_name = args.pos[0].to_str();
    args.pos.erase(args.pos.begin());
  }
  List out;
  for (const auto& item : items) {
    in.step();
    Value v = with_attr ? get_path(in, item, attr) : item;
    bool ok = test_name.empty() ? v.truthy() : in.test(test_name, v, args);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value minmax(Interpreter& in, const Value& input, const Args& args, bool want_max) {
  auto a = args.bind(want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool cs = a[0] && a[0]->truthy();
  List items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t i) {
    return fold_case(a[1] && !a[1]->is_none() ? get_path(in, items[i], *a[1]) : items[i], cs);
  };
  Value best_key = key(0);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(i);
    if (compare_op(want_max ? ">" : "<", k, best_key)) best = i, best_key = k;
  }
  return items[best];
}

Value tojson_filter(const Value& input, const Args& args) {
  auto a = args.bind("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    o.has_indent = true;
    if (a[1]->is_string()) {
      o.indent = a[1]->str();
    } else if (a[1]->is_integral()) {
      o.indent = std::string(size_t(std::clamp<int64_t>(a[1]->as_int(), 0, 4096)), ' ');
    } else {
      fault(cat("TypeError: can't multiply sequence by non-int of type '", a[1]->type_name(), "'"));
    }
    o.item_sep = ",";
  }
  if (a[2] && !a[2]->is_none()) {
    List seps = iterate(*a[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      fault("ValueError: separators must be a pair of strings");
    o.item_sep = seps[0].str();
    o.key_sep = seps[1].str();
  }
  o.sort_keys = a[3] && a[3]->truthy();
  return Value::string(to_json(input, o));
}

std::string jinja_title(const std::string& s) {
  // Words start after whitespace or one of -([{<.
  std::u32string u = decode_utf8(s), out;
  bool start = true;
  for (char32_t c : u) {
    bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out.push_back(c);
      start = true;
    } else {
      std::string one = encode_utf8(std::u32string(1, c));
      std::string mapped = start ? py_upper(one) : py_lower(one);
      for (char32_t m : decode_utf8(mapped)) out.push_back(m);
      start = false;
    }
  }
  return encode_utf8(out);
}

}  // namespace

Value call_filter(Interpreter& in, const std::string& name, const Value& input, Args args) {
  const Value& v = input;
  auto soft_str = [&]() { return v.is_string() ? v : Value::string(v.to_str()); };
  if (name == "default" || name == "d") {
    auto a = args.bind("default", {"default_value", "boolean"});
    bool boolean = a[1] && a[1]->truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return a[0] ? *a[0] : Value::string("");
    return v;
  }
  if (name == "tojson") return tojson_filter(v, args);
  if (name == "length" || name == "count")
    return args.bind(name.c_str(), {}), Value::integer(length_of(v));
  if (name == "string") return args.bind("string", {}), soft_str();
  if (name == "safe") return args.bind("safe", {}), Value::string(v.to_str(), true);
  if (name == "escape" || name == "e" || name == "forceescape") {
    args.bind(name.c_str(), {});
    if (v.is_markup() && name != "forceescape") return v;
    return Value::string(html_escape(v.to_str()), true);
  }
  if (name == "trim") {
    auto a = args.bind("trim", {"chars"});
    std::optional<std::string> chars;
    if (a[0] && !a[0]->is_none()) chars = a[0]->to_str();
    return Value::string(py_strip(v.to_str(), chars, true, true), v.is_markup());
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    args.bind(name.c_str(), {});
    std::string s = v.to_str();
    std::string r = name == "upper"        ? py_upper(s)
                    : name == "lower"      ? py_lower(s)
                    : name == "capitalize" ? py_capitalize(s)
                                           : jinja_title(s);
    return Value::string(std::move(r), v.is_markup());
  }
  if (name == "replace") {
    auto a = args.bind("replace", {"old", "new", "count"}, 2);
    int64_t count = a[2] && !a[2]->is_none() ? a[2]->as_int() : -1;
    return Value::string(py_replace(v.to_str(), a[0]->to_str(), a[1]->to_str(), count));
  }
  if (name == "first" || name == "last") {
    args.bind(name.c_str(), {});
    List items = iterate(v);
    if (items.empty()) {
      return Value::undefined(cat("No ", name, " item, sequence was empty."));
    }
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    auto a = args.bind("join", {"d", "attribute"});
    std::string sep = a[0] ? a[0]->to_str() : "";
    std::string out;
    List items = iterate(v);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      out += (a[1] && !a[1]->is_none() ? get_path(in, items[i], *a[1]) : items[i]).to_str();
      check_string_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "list") return args.bind("list", {}), Value::list(iterate(v));
  if (name == "items") {
    args.bind("items", {});
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) fault("TypeError: Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, val] : v.dict().entries) out.push_back(Value::tuple({k, val}));
    return Value::list(std::move(out));
  }
  if (name == "int") {
    auto a = args.bind("int", {"default", "base"});
    Value dflt = a[0] ? *a[0] : Value::integer(0);
    int base = a[1] ? int(a[1]->as_int()) : 10;
    if (v.is_string()) {
      if (auto i = parse_py_int(v.str(), base)) return Value::integer(*i);
      if (auto f = parse_py_float(v.str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
        return Value::integer(int64_t(*f));
      return dflt;
    }
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.is_float() && std::isfinite(v.as_float()) && std::fabs(v.as_float()) < 9.2e18)
      return Value::integer(int64_t(v.as_float()));
    return dflt;
  }
  if (name == "float") {
    auto a = args.bind("float", {"default"});
    if (v.is_number()) return Value::number(v.as_float());
    if (v.is_string()) {
      if (auto f = parse_py_float(v.str())) return Value::number(*f);
    }
    return a[0] ? *a[0] : Value::number(0.0);
  }
  if (name == "abs") {
    args.bind("abs", {});
    if (v.is_float()) return Value::number(std::fabs(v.as_float()));
    if (v.is_integral()) {
      if (v.as_int() == INT64_MIN) fault("OverflowError: integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    if (v.is_undefined()) fail_undefined(v);
    fault(cat("TypeError: bad operand type for abs(): '", v.type_name(), "'"));
  }
  if (name == "round") {
    auto a = args.bind("round", {"precision", "method"});
    int64_t prec = a[0] ? a[0]->as_int() : 0;
    std::string method = a[1] ? a[1]->to_str() : "common";
    if (!v.is_number())
      fault(cat("TypeError: type ", v.type_name(), " doesn't define __round__ method"));
    double x = v.as_float(), scale = std::pow(10.0, double(std::clamp<int64_t>(prec, -300, 300)));
    if (method == "common") return Value::number(std::nearbyint(x * scale) / scale);
    if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
    if (method == "floor") return Value::number(std::floor(x * scale) / scale);
    fault("FilterArgumentError: method must be common, ceil or floor");
  }
  if (name == "reverse") {
    args.bind("reverse", {});
    if (v.is_string()) {
      std::u32string u = decode_utf8(v.str());
      std::reverse(u.begin(), u.end());
      return Value::string(encode_utf8(u), v.is_markup());
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    auto a = args.bind("sort", {"reverse", "case_sensitive", "attribute"});
    List items = iterate(v);
    std::vector<Value> keys;
    for (const auto& item : items) {
      Value k = item;
      if (a[2] && !a[2]->is_none()) {
        List parts;
        for (const auto& p : py_split(a[2]->to_str(), std::string(","), -1))
          parts.push_back(
              fold_case(get_path(in, item, Value::string(p)), opt_bool(a[1]).value_or(false)));
        k = parts.size() == 1 ? parts[0] : Value::list(std::move(parts));
      } else {
        k = fold_case(item, opt_bool(a[1]).value_or(false));
      }
      keys.push_back(std::move(k));
    }
    sort_by_key(items, keys, opt_bool(a[0]).value_or(false));
    return Value::list(std::move(items));
  }
  if (name == "dictsort") {
    auto a = args.bind("dictsort", {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) fault("TypeError: dictsort expects a mapping");
    std::string by = a[1] ? a[1]->to_str() : "key";
    if (by != "key" && by != "value")
      fault("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
    List items;
    std::vector<Value> keys;
    for (const auto& [k, val] : v.dict().entries) {
      items.push_back(Value::tuple({k, val}));
      keys.push_back(fold_case(by == "key" ? k : val, opt_bool(a[0]).value_or(false)));
    }
    sort_by_key(items, keys, opt_bool(a[2]).value_or(false));
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    auto a = args.bind("unique", {"case_sensitive", "attribute"});
    List out, seen;
    for (const auto& item : iterate(v)) {
      Value k = fold_case(a[1] && !a[1]->is_none() ? get_path(in, item, *a[1]) : item,
                          opt_bool(a[0]).value_or(false));
      charge_steps(int64_t(seen.size() >> 4));
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, k); }))
        continue;
      seen.push_back(k);
      out.push_back(item);
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") return minmax(in, v, args, name == "max");
  if (name == "sum") {
    auto a = args.bind("sum", {"attribute", "start"});
    Value total = a[1] ? *a[1] : Value::integer(0);
    for (const auto& item : iterate(v))
      total = binary_op("+", total, a[0] && !a[0]->is_none() ? get_path(in, item, *a[0]) : item);
    return total;
  }
  if (name == "map") {
    List items = iterate(v);
    List out;
    auto attr = std::find_if(args.kw.begin(), args.kw.end(),
                             [](const auto& p) { return p.first == "attribute"; });
    if (attr != args.kw.end()) {
      Value dflt = Value::none();
      for (const auto& [k, val] : args.kw) {
        if (k == "default") {
          dflt = val;
        } else if (k != "attribute") {
          fault(cat("FilterArgumentError: Unexpected keyword argument '", k, "'"));
        }
      }
      for (const auto& item : items) {
        Value r = get_path(in, item, attr->second);
        out.push_back(r.is_undefined() && !dflt.is_none() ? dflt : r);
      }
      return Value::list(std::move(out));
    }
    if (args.pos.empty()) fault("FilterArgumentError: map requires a filter argument");
    std::string filter = args.pos[0].to_str();
    args.pos.erase(args.pos.begin());
    for (const auto& item : items) {
      in.step();
      out.push_back(in.filter(filter, item, args));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject")
    return select_impl(in, v, std::move(args), false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return select_impl(in, v, std::move(args), true, name == "selectattr");
  if (name == "attr") {
    auto a = args.bind("attr", {"name"}, 1);
    if (v.is_dict()) {
      auto m = find_method(v, a[0]->to_str());
      return m ? *m
               : Value::undefined(cat("'dict object' has no attribute '", a[0]->to_str(), "'"));
    }
    return in.getattr(v, a[0]->to_str());
  }
  if (name == "format") {
    if (!args.pos.empty() && !args.kw.empty())
      fault("FilterArgumentError: can't handle positional and keyword arguments at the same time");
    if (!args.kw.empty()) {
      auto d = std::make_shared<Dict>();
      for (auto& [k, val] : args.kw) d->set(Value::string(k), val);
      return Value::string(printf_format(v.to_str(), Value::dict(std::move(d))));
    }
    return Value::string(printf_format(v.to_str(), Value::tuple(args.pos)));
  }
  if (name == "indent") {
    auto a = args.bind("indent", {"width", "first", "blank"});
    std::string ind =
        a[0] && a[0]->is_string()
            ? a[0]->str()
            : std::string(size_t(std::clamp<int64_t>(a[0] ? a[0]->as_int() : 4, 0, 4096)), ' ');
    std::vector<std::string> lines = py_splitlines(v.to_str() + "\n", false);
    std::string rv;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n";
      bool indent_it = i > 0 && (opt_bool(a[2]).value_or(false) || !lines[i].empty());
      rv += (indent_it ? ind : "") + lines[i];
      check_string_size(rv.size());
    }
    if (opt_bool(a[1]).value_or(false)) rv = ind + rv;
    return Value::string(std::move(rv), v.is_markup());
  }
  if (name == "center") {
    auto a = args.bind("center", {"width"});
    auto m = find_method(soft_str(), "center");
    Args ca;
    ca.pos.push_back(a[0] ? *a[0] : Value::integer(80));
    return in.call(*m, std::move(ca));
  }
  if (name == "wordcount") {
    args.bind("wordcount", {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : decode_utf8(v.to_str())) {
      bool w = c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
               c >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "batch") {
    auto a = args.bind("batch", {"linecount", "fill_with"}, 1);
    int64_t n = a[0]->as_int();
    if (n <= 0) fault("ValueError: batch size must be positive");
    if (a[1] && !a[1]->is_none()) check_list_size(size_t(n));
    List out, cur;
    for (const auto& item : iterate(v)) {
      cur.push_back(item);
      if (int64_t(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
    }
    if (!cur.empty()) {
      if (a[1] && !a[1]->is_none())
        while (int64_t(cur.size()) < n) cur.push_back(*a[1]);
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::list(std::move(out));
  }
  if (name == "pprint") return args.bind("pprint", {}), Value::string(v.repr());
  for (const char* u : kUnsupportedFilters)
    if (name == u)
      fault(cat("the '", name, "' filter is not supported by strata's chat templates"));
  fault(cat("TemplateAssertionError: No filter named '", name, "'."));
}

bool call_test(Interpreter& in, const std::string& name, const Value& v, Args args) {
  auto one = [&](const char* fn) { return *args.bind(fn, {"other"}, 1)[0]; };
  if (name == "defined") return args.bind("defined", {}), !v.is_undefined();
  if (name == "undefined") return args.bind("undefined", {}), v.is_undefined();
  if (name == "none") return args.bind("none", {}), v.is_none();
  if (name == "boolean") return args.bind("boolean", {}), v.is_bool();
  if (name == "true") return args.bind("true", {}), v.is_bool() && v.as_bool();
  if (name == "false") return args.bind("false", {}), v.is_bool() && !v.as_bool();
  if (name == "integer") return args.bind("integer", {}), v.is_int();
  if (name == "float") return args.bind("float", {}), v.is_float();
  if (name == "number") return args.bind("number", {}), v.is_number();
  if (name == "string") return args.bind("string", {}), v.is_string();
  if (name == "mapping") return args.bind("mapping", {}), v.is_dict();
  if (name == "iterable") {
    args.bind("iterable", {});
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() ||
           (v.is_callable() && v.call().type == Callable::Type::kLoop);
  }
  if (name == "sequence") {
    args.bind("sequence", {});
    return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
  }
  if (name == "callable") return args.bind("callable", {}), v.is_callable() || v.is_undefined();
  if (name == "escaped") return args.bind("escaped", {}), v.is_markup();
  if (name == "lower") return args.bind("lower", {}), py_islower(v.to_str());
  if (name == "upper") return args.bind("upper", {}), py_isupper(v.to_str());
  if (name == "odd" || name == "even") {
    args.bind(name.c_str(), {});
    Value r = binary_op("%", v, Value::integer(2));
    return (r.as_float() == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    Value r = binary_op("%", v, *args.bind("divisibleby", {"num"}, 1)[0]);
    return r.as_float() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==")
    return compare_op("==", v, one(name.c_str()));
  if (name == "ne" || name == "!=") return compare_op("!=", v, one(name.c_str()));
  if (name == "lt" || name == "lessthan" || name == "<")
    return compare_op("<", v, one(name.c_str()));
  if (name == "le" || name == "<=") return compare_op("<=", v, one(name.c_str()));
  if (name == "gt" || name == "greaterthan" || name == ">")
    return compare_op(">", v, one(name.c_str()));
  if (name == "ge" || name == ">=") return compare_op(">=", v, one(name.c_str()));
  if (name == "in") return contains(*args.bind("in", {"seq"}, 1)[0], v);
  if (name == "sameas") return py_identical(v, one("sameas"));
  if (name == "filter" || name == "test") {
    args.bind(name.c_str(), {});
    static const char* const kFilters[] = {
        "default",    "d",          "tojson",      "length", "count",   "string", "safe",
        "escape",     "e",          "forceescape", "trim",   "upper",   "lower",  "capitalize",
        "title",      "replace",    "first",       "last",   "join",    "list",   "items",
        "int",        "float",      "abs",         "round",  "reverse", "sort",   "dictsort",
        "unique",     "min",        "max",         "sum",    "map",     "select", "reject",
        "selectattr", "rejectattr", "attr",        "format", "indent",  "center", "wordcount",
        "batch",      "pprint"};
    static const char* const kTests[] = {
        "defined", "undefined", "none",   "boolean",  "true",     "false",       "integer",
        "float",   "number",    "string", "mapping",  "iterable", "sequence",    "callable",
        "escaped", "lower",     "upper",  "odd",      "even",     "divisibleby", "eq",
        "equalto", "ne",        "lt",     "lessthan", "le",       "gt",          "greaterthan",
        "ge",      "in",        "sameas", "filter",   "test",     "==",          "!=",
        "<",       "<=",        ">",      ">="};
    std::string n = v.to_str();
    auto has = [&](const auto& list) {
      return std::any_of(std::begin(list), std::end(list), [&](const char* x) { return n == x; });
    };
    return name == "filter" ? has(kFilters) : has(kTests);
  }
  (void)in;
  fault(cat("TemplateAssertionError: No test named '", name, "'."));
}

}  // namespace strata::jinja
