// The Jinja interpreter: executes a Program against a context with jinja2's semantics as
// transformers configures it (ImmutableSandboxedEnvironment, default Undefined, loopcontrols).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "strata/tokenizer/jinja_ast.h"
#include "strata/tokenizer/jinja_value.h"

namespace strata::jinja {

// Variables of one frame; lookups fall through to the parent (the enclosing block, or a
// macro's defining scope).
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

// State behind a for loop's `loop` variable.
struct LoopState {
  ListPtr items;
  size_t index = 0;
  std::optional<Value> last_changed;  // loop.changed()
};

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // Binds to a Python-style signature; faults on surplus or unknown arguments, or when one of
  // the first `required` names is missing.
  std::vector<std::optional<Value>> bind(const char* fn, std::initializer_list<const char*> names,
                                         size_t required = 0) const;
};

class Interpreter {
 public:
  Interpreter(const Program& program, const Limits& limits, const Dict& context);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string run();

  // Used by the builtins.
  Value call(const Value& callee, Args args);
  Value filter(const std::string& name, const Value& input, Args args);
  bool test(const std::string& name, const Value& input, Args args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  Value make_namespace(DictPtr attrs);
  void step();  // counts work against Limits::max_steps

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_impl(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void assign(const Target& t, const Value& v, const ScopePtr& scope);
  Value apply_filters(const std::vector<FilterCall>& filters, Value v, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_impl(const Expr& e, const ScopePtr& scope);
  Args eval_args(const Expr& e, size_t first, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope);
  Value call_macro(const Callable& m, Args args);
  void append(std::string& out, std::string_view s);

  const Program& program_;
  const Limits& limits_;
  const Dict& context_;
  int call_depth_ = 0;
  ScopePtr root_;
  // Scopes holding macros and all namespaces: cleared after the render to break the reference
  // cycles that closures and namespace attributes can form.
  std::vector<ScopePtr> pinned_scopes_;
  std::vector<DictPtr> namespaces_;
};

// Builtins (jinja_builtins.cpp, jinja_methods.cpp).
Value call_filter(Interpreter& in, const std::string& name, const Value& input, Args args);
bool call_test(Interpreter& in, const std::string& name, const Value& input, Args args);
// Attribute lookup of methods: a bound method, an "unsafe" undefined for mutating methods of the
// immutable sandbox, or nullopt when the type has no such method.
std::optional<Value> find_method(const Value& self, const std::string& name);
Value call_method(Interpreter& in, const Callable& method, Args args);
bool is_global(const std::string& name);
Value global_function(const std::string& name);
Value call_global(Interpreter& in, const Callable& fn, Args args);
List iterate(const Value& v);  // iter(v) materialised; faults when not iterable
std::string undefined_message(const Value& undef);
[[noreturn]] void fail_undefined(const Value& undef);
std::string html_escape(std::string_view s);
std::string printf_format(const std::string& fmt, const Value& args);  // "%s" % x

// Python binary operators and comparisons.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool compare_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// obj[start:stop:step] (None for omitted parts); undefined when obj cannot be sliced.
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

}  // namespace strata::jinja
