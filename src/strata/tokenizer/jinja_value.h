// Values of the Jinja interpreter, modelled on the Python objects jinja2 works with: undefined,
// None, bool, int, float, str (optionally "markup", i.e. |safe), list, tuple, dict (insertion
// ordered), namespace objects and callables (macros, builtins, bound methods, loop objects).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "strata/core/error.h"

namespace strata::jinja {

class Value;
struct Dict;
struct Callable;
using List = std::vector<Value>;
using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<Dict>;
using CallablePtr = std::shared_ptr<Callable>;

// An error raised while evaluating, without a location yet: the interpreter adds the template
// line and column of the innermost expression or statement and rethrows it as a strata::Error.
struct Fault {
  std::string message;
};
[[noreturn]] void fault(std::string message);

// raise_exception(msg) in a template: what() is exactly the template's message.
class RaisedError : public Error {
 public:
  explicit RaisedError(const std::string& message) : Error(message) {}
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s, bool markup = false);
  static Value list(List items);
  static Value tuple(List items);
  static Value list_ptr(ListPtr items, bool tuple = false);
  static Value dict(DictPtr d);
  static Value new_dict();
  static Value namespace_(DictPtr attrs);
  static Value callable(CallablePtr c);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // excludes bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }  // list or tuple
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }

  // Accessors: as_int / as_float fault (TypeError) on values that are not numbers.
  bool as_bool() const;
  int64_t as_int() const;          // bool or int
  double as_float() const;         // any number
  const std::string& str() const;  // string contents, or the undefined hint
  const List& items() const;       // list or tuple
  const ListPtr& items_ptr() const;
  Dict& dict() const;  // dict or namespace
  const DictPtr& dict_ptr() const;
  Callable& call() const;
  const CallablePtr& call_ptr() const;

  // Python semantics.
  bool truthy() const;
  std::string to_str() const;     // str(x); undefined prints as ""
  std::string repr() const;       // repr(x)
  const char* type_name() const;  // "str", "NoneType", "dict", ...
  std::string type_repr() const;  // jinja's object_type_repr: "dict object", "None"

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::shared_ptr<const std::string>, ListPtr,
               DictPtr, CallablePtr>
      data_;
};

// An insertion-ordered dict (Python dict semantics: re-assigning a key keeps its position).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }
};

struct Scope;
struct MacroDef;
struct LoopState;

// Anything a template can call (or, for loop objects, look attributes up on).
struct Callable {
  enum class Type : uint8_t { kMacro, kBuiltin, kMethod, kLoop };
  Type type = Type::kBuiltin;
  std::string name;                 // macro / builtin / method name
  Value self;                       // kMethod: the receiver
  const MacroDef* macro = nullptr;  // kMacro
  std::shared_ptr<Scope> closure;   // kMacro: the scope it was defined in
  std::shared_ptr<LoopState> loop;  // kLoop
};

// Python ==, <, hashing-equality for dict keys.
bool py_equal(const Value& a, const Value& b);
int py_compare(const Value& a, const Value& b);     // -1/0/1; faults on unorderable types
bool py_identical(const Value& a, const Value& b);  // `is`

// json.dumps(x, ensure_ascii, indent, separators, sort_keys) as Python prints it. indent: a
// number of spaces, or an explicit string; none for a single line.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& opts);

// Limits that keep a render bounded (fuzzing, hostile templates).
struct Limits {
  size_t max_string_bytes = size_t(64) << 20;  // any one string, including the output
  size_t max_list_items = size_t(1) << 24;
  // Loop iterations, macro calls and output statements, plus one step per KiB of string and per
  // 16 list items built.
  int64_t max_steps = 50'000'000;
  int max_call_depth = 400;   // macro recursion
  int max_parse_depth = 200;  // expression / block nesting
};

void check_string_size(size_t bytes);  // faults above the active limit
void check_list_size(size_t items);
void charge_steps(int64_t steps);  // faults when the render's step budget is spent
void reset_steps();
// Per thread, for the helpers above; returns the previous setting.
const Limits* set_active_limits(const Limits* limits);

}  // namespace strata::jinja
