// Jinja parser (see jinja_parser.h). The functions mirror jinja2.parser.Parser so that the
// precedence and the corner cases (filters binding tighter than "if", "is" tests taking one bare
// argument, implicit string concatenation, ...) behave the same.
#include "strata/tokenizer/jinja_parser.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/tokenizer/jinja_lexer.h"

namespace strata::jinja {

namespace {

const char* const kUnsupportedTags[] = {"call",  "include", "import",     "from",  "extends",
                                        "block", "do",      "autoescape", "trans", "raw"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const Limits& limits)
      : toks_(std::move(tokens)), max_depth_(limits.max_parse_depth) {}

  std::unique_ptr<Program> run() {
    auto prog = std::make_unique<Program>();
    std::string found;
    prog->body = parse_until({}, "", 0, &found);
    return prog;
  }

 private:
  // --- token stream -------------------------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kName:
      case Tok::kOp: return t.text;
      case Tok::kString: return "string";
      default: return token_desc(t.type);
    }
  }

  [[noreturn]] void fail_here(const std::string& message) const {
    syntax_error(cur().line, cur().col, message);
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(cat("expected token '", op, "', got '", describe(cur()), "'"));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName)
      fail_here(cat("expected token 'name', got '", describe(cur()), "'"));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd)
      fail_here(cat("expected token 'end of statement block', got '", describe(cur()), "'"));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > p->max_depth_) p->fail_here("template nesting is too deep");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  template <class T>
  std::unique_ptr<T> node_at(const Token& t) {
    auto n = std::make_unique<T>();
    n->line = t.line;
    n->col = t.col;
    return n;
  }
  ExprPtr expr_at(ExprKind kind, const Token& t) {
    auto e = node_at<Expr>(t);
    e->kind = kind;
    return e;
  }
  StmtPtr stmt_at(StmtKind kind, const Token& t) {
    auto s = node_at<Stmt>(t);
    s->kind = kind;
    return s;
  }

  // Records the subtree height of a finished node; chains built by loops (a + b + c ...,
  // x.a.b.c ..., x|f|g ...) would otherwise make evaluation and destruction recurse unboundedly.
  ExprPtr fin(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args)
      if (a) h = std::max(h, a->height);
    for (const auto& [k, v] : e->kwargs) h = std::max(h, v->height);
    if (e->dyn_args) h = std::max(h, e->dyn_args->height);
    if (e->dyn_kwargs) h = std::max(h, e->dyn_kwargs->height);
    e->height = h + 1;
    if (e->height > max_depth_) syntax_error(e->line, e->col, "expression is nested too deeply");
    return e;
  }

  // --- statements ---------------------------------------------------------------------------
  // Parses template data and statements until a block tag named in `ends` (returned in *found,
  // with the stream just after the tag name) or the end of the template.
  Body parse_until(const std::vector<std::string>& ends, const std::string& block, int open_line,
                   std::string* found) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (!ends.empty()) {
          syntax_error(t.line, t.col,
                       cat("unexpected end of template: the '", block, "' block opened at line ",
                           open_line, " is never closed (expected ", end_list(ends), ")"));
        }
        return body;
      }
      if (t.type == Tok::kText) {
        auto s = stmt_at(StmtKind::kText, t);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::kVarBegin) {
        auto s = stmt_at(StmtKind::kOutput, t);
        next();
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != Tok::kVarEnd)
          fail_here(cat("expected token 'end of print statement', got '", describe(cur()), "'"));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        if (cur().type != Tok::kName) fail_here("tag name expected");
        std::string tag = cur().text;
        if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
          *found = tag;
          next();
          return body;
        }
        body.push_back(parse_statement(ends, block));
      } else {
        fail_here(cat("unexpected '", describe(t), "'"));
      }
    }
  }

  static std::string end_list(const std::vector<std::string>& ends) {
    std::string out;
    for (size_t i = 0; i < ends.size(); ++i) out += (i ? " or '" : "'") + ends[i] + "'";
    return out;
  }

  StmtPtr parse_statement(const std::vector<std::string>& ends, const std::string& block) {
    const Token& t = cur();
    std::string tag = t.text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_here(cat("'", tag, "' is not inside a loop"));
      auto s = stmt_at(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
      next();
      expect_block_end();
      return s;
    }
    for (const char* u : kUnsupportedTags)
      if (tag == u)
        fail_here(cat("the '", tag, "' tag is not supported by strata's chat templates"));
    if (ends.empty()) fail_here(cat("Encountered unknown tag '", tag, "'."));
    fail_here(cat("Encountered unknown tag '", tag,
                  "'. Jinja was looking for the following tags: ", end_list(ends),
                  ". The innermost block that needs to be closed is '", block, "'."));
  }

  StmtPtr parse_for() {
    auto s = stmt_at(StmtKind::kFor, cur());
    next();
    s->target = parse_assign_target(false, "in");
    if (!skip_name("in")) fail_here(cat("expected token 'in', got '", describe(cur()), "'"));
    s->expr = parse_tuple(false, false, "recursive", false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail_here("recursive loops are not supported");
    expect_block_end();
    std::string found;
    ++loop_depth_;
    s->body = parse_until({"endfor", "else"}, "for", s->line, &found);
    --loop_depth_;
    if (found == "else") {
      expect_block_end();
      s->else_body = parse_until({"endfor"}, "for", s->line, &found);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_if() {
    auto s = stmt_at(StmtKind::kIf, cur());
    next();
    std::string found = "if";
    while (true) {
      s->conds.push_back(parse_tuple(false, false, "", false));
      expect_block_end();
      s->bodies.push_back(parse_until({"elif", "else", "endif"}, "if", s->line, &found));
      if (found != "elif") break;
    }
    if (found == "else") {
      expect_block_end();
      s->else_body = parse_until({"endif"}, "if", s->line, &found);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const Token& t = cur();
    next();
    Target target = parse_assign_target(true, "");
    if (skip_op("=")) {
      auto s = stmt_at(StmtKind::kSet, t);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, "", false);
      expect_block_end();
      return s;
    }
    auto s = stmt_at(StmtKind::kSetBlock, t);
    s->target = std::move(target);
    while (is_op("|")) {
      next();
      s->filters.push_back(parse_filter_call());
    }
    expect_block_end();
    std::string found;
    s->body = parse_until({"endset"}, "set", s->line, &found);
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = stmt_at(StmtKind::kMacro, cur());
    next();
    s->macro = std::make_unique<MacroDef>();
    MacroDef& m = *s->macro;
    m.name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      m.params.push_back(expect_name());
      if (skip_op("=")) {
        m.defaults.push_back(parse_expression(true));
      } else if (!m.defaults.empty()) {
        fail_here("non-default argument follows default argument");
      }
    }
    next();
    expect_block_end();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(&m);
    std::string found;
    m.body = parse_until({"endmacro"}, "macro", s->line, &found);
    macros_.pop_back();
    loop_depth_ = saved_loops;
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt_at(StmtKind::kFilterBlock, cur());
    next();
    s->filters.push_back(parse_filter_call());
    while (skip_op("|")) s->filters.push_back(parse_filter_call());
    expect_block_end();
    std::string found;
    s->body = parse_until({"endfilter"}, "filter", s->line, &found);
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt_at(StmtKind::kWith, cur());
    next();
    while (cur().type != Tok::kBlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target target = parse_assign_target(false, "");
      expect_op("=");
      s->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    expect_block_end();
    std::string found;
    s->body = parse_until({"endwith"}, "with", s->line, &found);
    expect_block_end();
    return s;
  }

  StmtPtr parse_generation() {
    auto s = stmt_at(StmtKind::kScope, cur());
    next();
    expect_block_end();
    int saved_loops = loop_depth_;
    loop_depth_ = 0;  // the body is a caller() macro in jinja: no break/continue across it
    std::string found;
    s->body = parse_until({"endgeneration"}, "generation", s->line, &found);
    loop_depth_ = saved_loops;
    expect_block_end();
    return s;
  }

  // name | ns.attr (with_namespace) | a, b | (a, b)
  Target parse_assign_target(bool with_namespace, const char* extra_end) {
    if (with_namespace && cur().type == Tok::kName && look().type == Tok::kOp &&
        look().text == ".") {
      Target t;
      t.kind = Target::Kind::kAttr;
      t.name = expect_name();
      next();
      t.attr = expect_name();
      return t;
    }
    ExprPtr e = parse_tuple(true, false, extra_end, false);
    return to_target(*e);
  }

  Target to_target(const Expr& e) {
    Target t;
    if (e.kind == ExprKind::kName) {
      t.name = e.name;
      return t;
    }
    if (e.kind == ExprKind::kTuple) {
      t.kind = Target::Kind::kTuple;
      for (const auto& item : e.args) t.items.push_back(to_target(*item));
      return t;
    }
    const char* what = e.kind == ExprKind::kConst ? "const" : "expression";
    syntax_error(e.line, e.col, cat("can't assign to '", what, "'"));
  }

  // --- expressions --------------------------------------------------------------------------
  bool is_tuple_end(const std::string& extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || cur().type == Tok::kEof)
      return true;
    if (is_op(")")) return true;
    return !extra_end.empty() && is_name(extra_end.c_str());
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::string& extra_end,
                      bool explicit_parens) {
    DepthGuard guard(this);
    const Token& start = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_here(cat("Expected an expression, got '", describe(cur()), "'"));
    }
    auto e = expr_at(ExprKind::kTuple, start);
    e->args = std::move(args);
    return fin(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(this);
    const Token& start = cur();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      auto e = expr_at(ExprKind::kCondExpr, start);
      ExprPtr cond = parse_or();
      ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(other));
      expr1 = fin(std::move(e));
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, const Token& at, ExprPtr left, ExprPtr right, std::string op = {}) {
    auto e = expr_at(kind, at);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return fin(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      Token at = cur();
      next();
      left = binary(ExprKind::kOr, at, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      Token at = cur();
      next();
      left = binary(ExprKind::kAnd, at, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(this);
    if (is_name("not")) {
      auto e = expr_at(ExprKind::kNot, cur());
      next();
      e->args.push_back(parse_not());
      return fin(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& start = cur();
    ExprPtr expr = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        ops.push_back(cur().text);
        next();
      } else if (skip_name("in")) {
        ops.push_back("in");
      } else if (is_name("not") && look().type == Tok::kName && look().text == "in") {
        next();
        next();
        ops.push_back("notin");
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = expr_at(ExprKind::kCompare, start);
    e->args.push_back(std::move(expr));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->ops = std::move(ops);
    return fin(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token at = cur();
      next();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_concat(), at.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const Token& start = cur();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = expr_at(ExprKind::kConcat, start);
    e->args.push_back(std::move(first));
    while (skip_op("~")) e->args.push_back(parse_math2());
    return fin(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token at = cur();
      next();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_pow(), at.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      Token at = cur();
      next();
      left = binary(ExprKind::kBinary, at, std::move(left), parse_unary(true), "**");
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = expr_at(ExprKind::kUnary, cur());
      e->name = cur().text;
      next();
      e->args.push_back(parse_unary(false));
      node = fin(std::move(e));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& t = cur();
    if (t.type == Tok::kName) {
      ExprPtr e;
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e = expr_at(ExprKind::kConst, t);
        e->value = Value::boolean(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        e = expr_at(ExprKind::kConst, t);
        e->value = Value::none();
      } else {
        e = expr_at(ExprKind::kName, t);
        e->name = t.text;
        if (!macros_.empty()) {
          MacroDef* m = macros_.back();
          m->uses_varargs |= t.text == "varargs";
          m->uses_kwargs |= t.text == "kwargs";
          m->uses_caller |= t.text == "caller";
        }
      }
      next();
      return e;
    }
    if (t.type == Tok::kString) {
      auto e = expr_at(ExprKind::kConst, t);
      std::string s;
      while (cur().type == Tok::kString) {
        s += cur().text;
        next();
      }
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto e = expr_at(ExprKind::kConst, t);
      e->value = t.type == Tok::kInt ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, "", true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = expr_at(ExprKind::kList, t);
      next();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return fin(std::move(e));
    }
    if (is_op("{")) {
      auto e = expr_at(ExprKind::kDict, t);
      next();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return fin(std::move(e));
    }
    fail_here(cat("unexpected '", describe(t), "'"));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        while (skip_op("|")) {
          FilterCall f = parse_filter_call();
          auto e = std::make_unique<Expr>();
          e->kind = ExprKind::kFilter;
          e->line = f.line;
          e->col = f.col;
          e->name = std::move(f.name);
          e->args.push_back(std::move(node));
          for (auto& a : f.args) e->args.push_back(std::move(a));
          e->kwargs = std::move(f.kwargs);
          node = fin(std::move(e));
        }
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    Token at = cur();
    if (skip_op(".")) {
      const Token& attr = cur();
      if (attr.type == Tok::kName) {
        auto e = expr_at(ExprKind::kGetattr, at);
        e->name = attr.text;
        e->args.push_back(std::move(node));
        next();
        return fin(std::move(e));
      }
      if (attr.type != Tok::kInt) fail_here("expected name or number");
      auto idx = expr_at(ExprKind::kConst, attr);
      idx->value = Value::integer(attr.ival);
      next();
      return binary(ExprKind::kGetitem, at, std::move(node), std::move(idx));
    }
    next();  // [
    std::vector<ExprPtr> parts;
    ExprPtr slice;
    size_t count = 0;
    while (!is_op("]")) {
      if (count++) expect_op(",");
      ExprPtr start = is_op(":") ? nullptr : parse_expression(true);
      if (!is_op(":")) {
        parts.push_back(std::move(start));
        continue;
      }
      next();
      auto s = expr_at(ExprKind::kSlice, at);
      s->args.push_back(nullptr);  // the sliced value, filled in below
      s->args.push_back(std::move(start));
      s->args.push_back(is_op(":") || is_op("]") || is_op(",") ? nullptr : parse_expression(true));
      ExprPtr step;
      if (skip_op(":")) step = is_op("]") || is_op(",") ? nullptr : parse_expression(true);
      s->args.push_back(std::move(step));
      slice = std::move(s);
    }
    expect_op("]");
    if (slice) {
      if (count != 1) syntax_error(at.line, at.col, "multi-dimensional slices are not supported");
      slice->args[0] = std::move(node);
      return fin(std::move(slice));
    }
    if (parts.empty()) syntax_error(at.line, at.col, "Expected an expression, got ']'");
    ExprPtr index;
    if (parts.size() == 1) {
      index = std::move(parts[0]);
    } else {
      index = expr_at(ExprKind::kTuple, at);
      index->args = std::move(parts);
      index = fin(std::move(index));
    }
    return binary(ExprKind::kGetitem, at, std::move(node), std::move(index));
  }

  // (args, kw=..., *dyn, **dyn) after the callee / filter / test name.
  void parse_call_args(Expr* e) {
    const Token open = cur();
    expect_op("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) syntax_error(open.line, open.col, "invalid syntax for function call expression");
    };
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!e->dyn_args && !e->dyn_kwargs);
        e->dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!e->dyn_kwargs);
        e->dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().text == "=") {
        ensure(!e->dyn_kwargs);
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e->dyn_args && !e->dyn_kwargs && e->kwargs.empty());
        e->args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    next();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = expr_at(ExprKind::kCall, cur());
    e->args.push_back(std::move(node));
    parse_call_args(e.get());
    return fin(std::move(e));
  }

  FilterCall parse_filter_call() {
    FilterCall f;
    f.line = cur().line;
    f.col = cur().col;
    f.name = expect_name();
    while (skip_op(".")) f.name += "." + expect_name();
    if (is_op("(")) {
      Expr tmp;
      tmp.args.push_back(nullptr);
      parse_call_args(&tmp);
      if (tmp.dyn_args || tmp.dyn_kwargs)
        syntax_error(f.line, f.col, "*args / **kwargs in filter calls are not supported");
      for (size_t i = 1; i < tmp.args.size(); ++i) f.args.push_back(std::move(tmp.args[i]));
      f.kwargs = std::move(tmp.kwargs);
    }
    return f;
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = expr_at(ExprKind::kTest, cur());
    next();  // is
    e->negated = skip_name("not");
    e->name = expect_name();
    while (skip_op(".")) e->name += "." + expect_name();
    e->args.push_back(std::move(node));
    const Token& t = cur();
    bool arg_start = t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                     t.type == Tok::kFloat || is_op("[") || is_op("{");
    if (is_op("(")) {
      parse_call_args(e.get());
      if (e->dyn_args || e->dyn_kwargs)
        syntax_error(e->line, e->col, "*args / **kwargs in tests are not supported");
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return fin(std::move(e));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
};

}  // namespace

std::unique_ptr<Program> parse_template(std::string_view source, const Limits& limits) {
  return Parser(lex_template(source), limits).run();
}

}  // namespace strata::jinja
