// The syntax tree of a parsed Jinja template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strata/tokenizer/jinja_value.h"

namespace strata::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kConst,    // value
  kName,     // name
  kGetattr,  // args[0].name
  kGetitem,  // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
  kCall,     // args[0](args[1:], kwargs)
  kFilter,   // args[0] | name(args[1:], kwargs)
  kTest,     // args[0] is [not] name(args[1:], kwargs)
  kUnary,    // name ("-" / "+") args[0]
  kBinary,   // args[0] name args[1] for + - * / // % **
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (==, !=, <, <=, >, >=, in, notin)
  kAnd,
  kOr,
  kNot,
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
  kConcat,    // args joined with ~
  kList,
  kTuple,
  kDict,  // args: key0, value0, key1, value1, ...
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int col = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;    // f(*x)
  ExprPtr dyn_kwargs;  // f(**x)
  std::vector<std::string> ops;
  bool negated = false;  // kTest: "is not"
  int height = 1;        // of this subtree (bounded by the parser: evaluation recurses on it)
};

// An assignment target: name, (a, b) tuple, or ns.attr.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kAttr };
  Kind kind = Kind::kName;
  std::string name;  // kName, or the namespace variable for kAttr
  std::string attr;  // kAttr
  std::vector<Target> items;
};

// "|name(args)" applied to a value (filter blocks, set blocks, filter expressions).
struct FilterCall {
  std::string name;
  int line = 0;
  int col = 0;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conds[i] -> bodies[i]; else_body
  kFor,          // for target in expr [if filter] body else else_body
  kSet,          // set target = expr
  kSetBlock,     // {% set target | filters %}body{% endset %}
  kMacro,        // macro
  kFilterBlock,  // {% filter f %}body{% endfilter %}
  kWith,         // {% with a = 1 %}body{% endwith %}
  kScope,        // {% generation %}body{% endgeneration %}: a child scope
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // kFor: the inline "if"
  Target target;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<FilterCall> filters;
  std::vector<std::pair<Target, ExprPtr>> assigns;  // kWith
  std::unique_ptr<MacroDef> macro;
};

struct Program {
  Body body;
};

}  // namespace strata::jinja
