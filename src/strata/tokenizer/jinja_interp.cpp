// The Jinja interpreter (see jinja_interp.h): statements, expressions, scoping, macros and the
// sandboxed attribute / item lookups.
#include "strata/tokenizer/jinja_interp.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/tokenizer/jinja_text.h"

namespace strata::jinja {

namespace {

[[noreturn]] void located(int line, int col, const std::string& message) {
  fail("chat template line ", line, ", column ", col, ": ", message);
}

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

Value loop_method(const Value& loop, const char* name) {
  auto c = std::make_shared<Callable>();
  c->type = Callable::Type::kMethod;
  c->name = name;
  c->self = loop;
  return Value::callable(std::move(c));
}

// Attributes of a for loop's `loop` object.
std::optional<Value> loop_attr(const Value& loop, const std::string& name) {
  const LoopState& st = *loop.call().loop;
  const List& items = *st.items;
  int64_t i = int64_t(st.index), n = int64_t(items.size());
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem")
    return i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item");
  if (name == "cycle") return loop_method(loop, "cycle");
  if (name == "changed") return loop_method(loop, "changed");
  return std::nullopt;
}

// Python getattr() in the sandbox, without the item fallback.
std::optional<Value> attribute_of(const Value& obj, const std::string& name) {
  if (obj.is_namespace()) {
    if (const Value* v = obj.dict().find(name)) return *v;
    return std::nullopt;
  }
  if (obj.is_callable() && obj.call().type == Callable::Type::kLoop) return loop_attr(obj, name);
  return find_method(obj, name);
}

}  // namespace

Interpreter::Interpreter(const Program& program, const Limits& limits, const Dict& context)
    : program_(program), limits_(limits), context_(context), root_(std::make_shared<Scope>()) {}

Interpreter::~Interpreter() {
  // Break the cycles scope -> macro -> closure scope and namespace -> ... -> namespace.
  for (auto& s : pinned_scopes_) s->vars.clear();
  for (auto& d : namespaces_) d->entries.clear();
  root_->vars.clear();
}

std::string Interpreter::run() {
  reset_steps();
  std::string out;
  exec_body(program_.body, root_, out);
  return out;
}

void Interpreter::step() { charge_steps(1); }

void Interpreter::append(std::string& out, std::string_view s) {
  if (out.size() + s.size() > limits_.max_string_bytes) fault("output exceeds the render limit");
  out.append(s);
}

Value Interpreter::make_namespace(DictPtr attrs) {
  namespaces_.push_back(attrs);
  return Value::namespace_(std::move(attrs));
}

// --- statements ---------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope,
                                         std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    return exec_impl(s, scope, out);
  } catch (const Fault& f) {
    located(s.line, s.col, f.message);
  }
}

Interpreter::Flow Interpreter::exec_impl(const Stmt& s, const ScopePtr& scope, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText: append(out, s.text); return Flow::kNormal;
    case StmtKind::kOutput: {
      step();
      Value v = eval(*s.expr, scope);
      if (v.is_string()) {
        append(out, v.str());
      } else {
        append(out, v.to_str());
      }
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      for (size_t i = 0; i < s.conds.size(); ++i) {
        if (eval(*s.conds[i], scope).truthy()) return exec_body(s.bodies[i], scope, out);
      }
      return exec_body(s.else_body, scope, out);
    case StmtKind::kFor: return exec_for(s, scope, out);
    case StmtKind::kSet: assign(s.target, eval(*s.expr, scope), scope); return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string buf;
      exec_body(s.body, child_of(scope), buf);
      assign(s.target, apply_filters(s.filters, Value::string(std::move(buf)), scope), scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      auto c = std::make_shared<Callable>();
      c->type = Callable::Type::kMacro;
      c->name = s.macro->name;
      c->macro = s.macro.get();
      c->closure = scope;
      pinned_scopes_.push_back(scope);
      scope->vars[s.macro->name] = Value::callable(std::move(c));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string buf;
      exec_body(s.body, child_of(scope), buf);
      append(out, apply_filters(s.filters, Value::string(std::move(buf)), scope).to_str());
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      ScopePtr inner = child_of(scope);
      for (const auto& [target, expr] : s.assigns) assign(target, eval(*expr, scope), inner);
      exec_body(s.body, inner, out);
      return Flow::kNormal;
    }
    case StmtKind::kScope: exec_body(s.body, child_of(scope), out); return Flow::kNormal;
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.expr, scope);
  List items;
  try {
    items = iterate(iterable);
  } catch (const Fault& f) {
    located(s.expr->line, s.expr->col, f.message);
  }
  if (s.filter) {
    List kept;
    for (auto& item : items) {
      step();
      ScopePtr fs = child_of(scope);
      assign(s.target, item, fs);
      if (eval(*s.filter, fs).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, child_of(scope), out);
    return Flow::kNormal;
  }
  auto state = std::make_shared<LoopState>();
  state->items = std::make_shared<const List>(std::move(items));
  auto cb = std::make_shared<Callable>();
  cb->type = Callable::Type::kLoop;
  cb->name = "loop";
  cb->loop = state;
  Value loop_value = Value::callable(std::move(cb));
  for (size_t i = 0; i < state->items->size(); ++i) {
    step();
    state->index = i;
    ScopePtr it = child_of(scope);
    assign(s.target, (*state->items)[i], it);
    it->vars["loop"] = loop_value;
    if (exec_body(s.body, it, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  switch (t.kind) {
    case Target::Kind::kName: scope->vars[t.name] = v; return;
    case Target::Kind::kAttr: {
      Value ns = lookup(t.name, scope);
      if (!ns.is_namespace())
        fault("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      ns.dict().set(Value::string(t.attr), v);
      return;
    }
    case Target::Kind::kTuple: {
      List items = iterate(v);
      if (items.size() < t.items.size()) {
        fault(cat("ValueError: not enough values to unpack (expected ", t.items.size(), ", got ",
                  items.size(), ")"));
      }
      if (items.size() > t.items.size())
        fault(cat("ValueError: too many values to unpack (expected ", t.items.size(), ")"));
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
      return;
    }
  }
}

Value Interpreter::apply_filters(const std::vector<FilterCall>& filters, Value v,
                                 const ScopePtr& scope) {
  for (const auto& f : filters) {
    try {
      Args args;
      for (const auto& a : f.args) args.pos.push_back(eval(*a, scope));
      for (const auto& [k, e] : f.kwargs) args.kw.emplace_back(k, eval(*e, scope));
      v = filter(f.name, v, std::move(args));
    } catch (const Fault& fl) {
      located(f.line, f.col, fl.message);
    }
  }
  return v;
}

// --- expressions --------------------------------------------------------------------------------

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_impl(e, scope);
  } catch (const Fault& f) {
    located(e.line, e.col, f.message);
  }
}

Args Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
  Args args;
  for (size_t i = first; i < e.args.size(); ++i) args.pos.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.kw.emplace_back(k, eval(*v, scope));
  if (e.dyn_args) {
    for (auto& v : iterate(eval(*e.dyn_args, scope))) args.pos.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict())
      fault(cat("TypeError: argument after ** must be a mapping, not ", d.type_name()));
    for (const auto& [k, v] : d.dict().entries) {
      if (!k.is_string()) fault("TypeError: keywords must be strings");
      args.kw.emplace_back(k.str(), v);
    }
  }
  return args;
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) {
  for (Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = context_.find(name)) return *v;
  if (is_global(name)) return global_function(name);
  return Value::undefined(cat("'", name, "' is undefined"));
}

Value Interpreter::eval_impl(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return lookup(e.name, scope);
    case ExprKind::kGetattr: return getattr(eval(*e.args[0], scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.args[0], scope);
      return getitem(obj, eval(*e.args[1], scope));
    }
    case ExprKind::kSlice: {
      Value obj = eval(*e.args[0], scope);
      if (obj.is_undefined()) fail_undefined(obj);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        parts[i] = e.args[size_t(i) + 1] ? eval(*e.args[size_t(i) + 1], scope) : Value::none();
      return slice_value(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.args[0], scope);
      return call(callee, eval_args(e, 1, scope));
    }
    case ExprKind::kFilter: {
      Value input = eval(*e.args[0], scope);
      return filter(e.name, input, eval_args(e, 1, scope));
    }
    case ExprKind::kTest: {
      Value input = eval(*e.args[0], scope);
      bool r = test(e.name, input, eval_args(e, 1, scope));
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.args[0], scope);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) {
        fault(cat("TypeError: bad operand type for unary ", e.name, ": '", v.type_name(), "'"));
      }
      if (e.name == "+") return v.is_float() ? v : Value::integer(v.as_int());
      if (v.is_float()) return Value::number(-v.as_float());
      if (v.as_int() == INT64_MIN) fault("OverflowError: integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.args[0], scope);
      return binary_op(e.name, a, eval(*e.args[1], scope));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kAnd: {
      Value l = eval(*e.args[0], scope);
      return l.truthy() ? eval(*e.args[1], scope) : l;
    }
    case ExprKind::kOr: {
      Value l = eval(*e.args[0], scope);
      return l.truthy() ? l : eval(*e.args[1], scope);
    }
    case ExprKind::kNot: return Value::boolean(!eval(*e.args[0], scope).truthy());
    case ExprKind::kCondExpr:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined(cat("the inline if-expression on line ", e.line,
                                  " evaluated to false and no else section was defined."));
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& a : e.args) {
        s += eval(*a, scope).to_str();
        check_string_size(s.size());
      }
      return Value::string(std::move(s));
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      List items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                       : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() || k.is_dict() || k.is_namespace() || k.is_undefined())
          fault(cat("TypeError: unhashable type: '", k.type_name(), "'"));
        d->set(std::move(k), eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
  }
  return Value();
}

// --- calls and lookups --------------------------------------------------------------------------

Value Interpreter::call(const Value& callee, Args args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable())
    fault(cat("TypeError: '", callee.type_name(), "' object is not callable"));
  const Callable& c = callee.call();
  switch (c.type) {
    case Callable::Type::kMacro: return call_macro(c, std::move(args));
    case Callable::Type::kBuiltin: return call_global(*this, c, std::move(args));
    case Callable::Type::kMethod: return call_method(*this, c, std::move(args));
    case Callable::Type::kLoop: fault("recursive loops are not supported");
  }
  return Value();
}

Value Interpreter::call_macro(const Callable& c, Args args) {
  const MacroDef& m = *c.macro;
  if (call_depth_ >= limits_.max_call_depth)
    fault("RecursionError: maximum macro call depth exceeded");
  ++call_depth_;
  struct Restore {
    int& depth;
    ~Restore() { --depth; }
  } restore{call_depth_};
  step();
  ScopePtr sc = child_of(c.closure);
  size_t np = m.params.size();
  std::vector<bool> bound(np, false);
  List extra;
  for (size_t i = 0; i < args.pos.size(); ++i) {
    if (i < np) {
      sc->vars[m.params[i]] = std::move(args.pos[i]);
      bound[i] = true;
    } else if (m.uses_varargs) {
      extra.push_back(std::move(args.pos[i]));
    } else {
      fault(cat("TypeError: macro '", m.name, "' takes not more than ", np, " argument(s)"));
    }
  }
  auto kwargs = std::make_shared<Dict>();
  for (auto& [k, v] : args.kw) {
    auto it = std::find(m.params.begin(), m.params.end(), k);
    if (it != m.params.end()) {
      size_t idx = size_t(it - m.params.begin());
      if (bound[idx])
        fault(cat("TypeError: macro '", m.name, "' got multiple values for argument '", k, "'"));
      sc->vars[k] = std::move(v);
      bound[idx] = true;
    } else if (k == "caller" && m.uses_caller) {
      sc->vars["caller"] = std::move(v);
    } else if (m.uses_kwargs) {
      kwargs->set(Value::string(k), std::move(v));
    } else {
      fault(cat("TypeError: macro '", m.name, "' takes no keyword argument '", k, "'"));
    }
  }
  size_t first_default = np - m.defaults.size();
  for (size_t i = 0; i < np; ++i) {
    if (bound[i]) continue;
    sc->vars[m.params[i]] =
        i >= first_default
            ? eval(*m.defaults[i - first_default], sc)
            : Value::undefined(cat("parameter '", m.params[i], "' was not provided"));
  }
  if (m.uses_varargs) sc->vars["varargs"] = Value::tuple(std::move(extra));
  if (m.uses_kwargs) sc->vars["kwargs"] = Value::dict(std::move(kwargs));
  std::string out;
  exec_body(m.body, sc, out);
  return Value::string(std::move(out));
}

Value Interpreter::filter(const std::string& name, const Value& input, Args args) {
  return call_filter(*this, name, input, std::move(args));
}

bool Interpreter::test(const std::string& name, const Value& input, Args args) {
  return call_test(*this, name, input, std::move(args));
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (auto v = attribute_of(obj, name)) return *v;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return Value::undefined(cat("'", obj.type_repr(), "' has no attribute '", name, "'"));
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string u = decode_utf8(obj.str());
      int64_t n = int64_t(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(encode_utf8(u.substr(size_t(i), 1)));
    } else {
      int64_t n = int64_t(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[size_t(i)];
    }
  }
  if (key.is_string()) {
    if (auto v = attribute_of(obj, key.str())) return *v;
    return Value::undefined(cat("'", obj.type_repr(), "' has no attribute '", key.str(), "'"));
  }
  return Value::undefined(cat(obj.type_repr(), " has no element ", key.repr()));
}

}  // namespace strata::jinja
