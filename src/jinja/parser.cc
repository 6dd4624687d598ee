// Tokens -> AST, following jinja2's parser (jinja2/parser.py, 3.1): statement tags, expression
// precedence (conditional, or, and, not, comparisons, + -, ~, * / // %, **, unary, postfix,
// filters and tests), unknown filters and tests an error unless inside an if.
#include <algorithm>
#include <set>

#include "jinja/internal.h"
#include "jinja/lexer.h"

namespace kvtier::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Program> Run() {
    auto prog = std::make_unique<Program>();
    prog->body = Body({});
    if (Cur().type != TK::kEof) Error("unexpected tag '" + end_tag_ + "'");
    return prog;
  }

 private:
  const Token& Cur() const { return t_[i_]; }
  const Token& Peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  [[noreturn]] void Error(const std::string& msg) const {
    throw JinjaError(JinjaError::Type::kSyntax, msg, Cur().line, Cur().col);
  }
  bool IsOp(std::string_view op) const { return Cur().type == TK::kOp && Cur().text == op; }
  bool IsName(std::string_view n) const { return Cur().type == TK::kName && Cur().text == n; }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op)) Error("expected '" + std::string(op) + "', got '" + Describe() + "'");
    ++i_;
  }
  std::string Describe() const {
    switch (Cur().type) {
      case TK::kEof: return "end of template";
      case TK::kBlockEnd: return "end of statement block";
      case TK::kVarEnd: return "end of print statement";
      default: return Cur().text;
    }
  }
  std::string ExpectName() {
    if (Cur().type != TK::kName) Error("expected a name, got '" + Describe() + "'");
    return t_[i_++].text;
  }
  void ExpectBlockEnd() {
    if (Cur().type != TK::kBlockEnd) Error("expected end of statement block, got '" + Describe() + "'");
    ++i_;
  }
  NodePtr New(NK k) const {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = Cur().line;
    n->col = Cur().col;
    return n;
  }

  // Statements until a {% tag %} whose name is in `ends` (left current: the name token).
  std::vector<NodePtr> Body(const std::set<std::string>& ends) {
    std::vector<NodePtr> out;
    while (true) {
      const Token& tok = Cur();
      if (tok.type == TK::kEof) {
        if (!ends.empty()) {
          std::string want;
          for (const std::string& e : ends) {
            if (e.rfind("end", 0) == 0) want = e;
          }
          Error("unexpected end of template, expected '" + want + "'");
        }
        return out;
      }
      if (tok.type == TK::kData) {
        auto n = New(NK::kOutput);
        n->value = Value(tok.text);
        ++i_;
        out.push_back(std::move(n));
      } else if (tok.type == TK::kVarBegin) {
        ++i_;
        auto n = New(NK::kPrint);
        n->a = Expr();
        if (Cur().type != TK::kVarEnd) Error("expected end of print statement, got '" + Describe() + "'");
        ++i_;
        out.push_back(std::move(n));
      } else if (tok.type == TK::kBlockBegin) {
        ++i_;
        const std::string name = Cur().type == TK::kName ? Cur().text : "";
        if (ends.count(name)) return out;
        if (name.empty()) Error("expected a statement name, got '" + Describe() + "'");
        out.push_back(Statement());
      } else {
        Error("unexpected token");
      }
    }
  }

  NodePtr Statement() {
    const std::string name = Cur().text;
    if (name == "if") return If();
    if (name == "for") return For();
    if (name == "set") return Set();
    if (name == "macro") return Macro();
    if (name == "call") return CallBlock();
    if (name == "filter") return FilterBlock();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) Error("'" + name + "' outside of a loop");
      auto n = New(name == "break" ? NK::kBreak : NK::kContinue);
      ++i_;
      ExpectBlockEnd();
      return n;
    }
    if (name == "generation") {  // transformers' assistant-mask block: renders its body
      auto n = New(NK::kScope);
      ++i_;
      ExpectBlockEnd();
      n->args = Body({"endgeneration"});
      EndTag("endgeneration");
      return n;
    }
    Error("encountered unknown tag '" + name + "'");
  }

  void EndTag(const std::string& name) {
    if (!IsName(name)) Error("expected '" + name + "'");
    ++i_;
    ExpectBlockEnd();
  }

  NodePtr If() {
    auto n = New(NK::kIf);
    ++i_;
    ++if_depth_;
    n->a = Expr();
    ExpectBlockEnd();
    n->args = Body({"elif", "else", "endif"});
    if (IsName("elif")) {
      auto inner = If();  // consumes through endif
      n->else_body.push_back(std::move(inner));
      --if_depth_;
      return n;
    }
    if (IsName("else")) {
      ++i_;
      ExpectBlockEnd();
      n->else_body = Body({"endif"});
    }
    EndTag("endif");
    --if_depth_;
    return n;
  }

  // Targets of for / set: a name or names separated by commas (optionally in parentheses).
  std::vector<std::string> Targets() {
    std::vector<std::string> names;
    const bool paren = IsOp("(");
    if (paren) ++i_;
    names.push_back(ExpectName());
    while (IsOp(",")) {
      ++i_;
      if (Cur().type != TK::kName) break;
      names.push_back(ExpectName());
    }
    if (paren) ExpectOp(")");
    return names;
  }

  NodePtr For() {
    auto n = New(NK::kFor);
    ++i_;
    n->kw_names = Targets();
    if (!IsName("in")) Error("expected 'in'");
    ++i_;
    n->a = CondExpr(false);  // no conditional expression: `if` filters the loop
    if (IsName("if")) {
      ++i_;
      n->c = CondExpr(true);
    }
    if (IsName("recursive")) {
      ++i_;
      n->flag = true;
    }
    ExpectBlockEnd();
    ++loop_depth_;
    n->args = Body({"endfor", "else"});
    --loop_depth_;
    if (IsName("else")) {
      ++i_;
      ExpectBlockEnd();
      n->else_body = Body({"endfor"});
    }
    EndTag("endfor");
    return n;
  }

  NodePtr Set() {
    auto n = New(NK::kSet);
    ++i_;
    const std::string first = ExpectName();
    if (IsOp(".")) {  // namespace attribute
      ++i_;
      n->flag = true;
      n->kw_names = {first, ExpectName()};
    } else {
      n->kw_names = {first};
      while (IsOp(",")) {
        ++i_;
        n->kw_names.push_back(ExpectName());
      }
    }
    if (IsOp("=")) {
      ++i_;
      n->a = TupleOrExpr();
      ExpectBlockEnd();
      return n;
    }
    if (n->flag || n->kw_names.size() != 1) Error("expected '='");
    n->kind = NK::kSetBlock;
    n->a = FilterChain(nullptr);
    ExpectBlockEnd();
    n->args = Body({"endset"});
    EndTag("endset");
    return n;
  }

  void Params(Node* n) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!n->kw_names.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      n->kw_names.push_back(ExpectName());
      if (IsOp("=")) {
        ++i_;
        n->kw_args.push_back(Expr());
      } else {
        n->kw_args.push_back(nullptr);
      }
    }
    ++i_;
  }

  static void ScanNames(const Node* n, Node* macro) {
    if (n == nullptr) return;
    if (n->kind == NK::kName) {
      if (n->name == "varargs") macro->uses_varargs = true;
      if (n->name == "kwargs") macro->uses_kwargs = true;
      if (n->name == "caller") macro->uses_caller = true;
    }
    if (n->kind == NK::kMacro) return;  // a nested macro has its own
    for (const auto& c : n->args) ScanNames(c.get(), macro);
    for (const auto& c : n->kw_args) ScanNames(c.get(), macro);
    for (const auto& c : n->else_body) ScanNames(c.get(), macro);
    ScanNames(n->a.get(), macro);
    ScanNames(n->b.get(), macro);
    ScanNames(n->c.get(), macro);
  }

  NodePtr Macro() {
    auto n = New(NK::kMacro);
    ++i_;
    n->name = ExpectName();
    Params(n.get());
    ExpectBlockEnd();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    n->args = Body({"endmacro"});
    loop_depth_ = saved;
    EndTag("endmacro");
    for (const auto& c : n->args) ScanNames(c.get(), n.get());
    return n;
  }

  NodePtr CallBlock() {
    auto n = New(NK::kCallBlock);
    ++i_;
    if (IsOp("(")) Params(n.get());
    n->a = Expr();
    if (n->a->kind != NK::kCall) Error("expected call");
    ExpectBlockEnd();
    n->args = Body({"endcall"});
    EndTag("endcall");
    for (const auto& c : n->args) ScanNames(c.get(), n.get());
    return n;
  }

  NodePtr FilterBlock() {
    auto n = New(NK::kFilterBlock);
    ++i_;
    n->a = FilterChain(nullptr, /*leading_pipe=*/false);
    ExpectBlockEnd();
    n->args = Body({"endfilter"});
    EndTag("endfilter");
    return n;
  }

  // ---- expressions ----
  NodePtr TupleOrExpr() {
    auto first = Expr();
    if (!IsOp(",")) return first;
    auto t = New(NK::kTuple);
    t->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++i_;
      if (Cur().type == TK::kBlockEnd || Cur().type == TK::kVarEnd) break;
      t->args.push_back(Expr());
    }
    return t;
  }

  NodePtr Expr() { return CondExpr(true); }

  NodePtr CondExpr(bool with_cond) {
    auto e = Or();
    while (with_cond && IsName("if")) {
      auto n = New(NK::kCondExpr);
      ++i_;
      n->c = Or();
      n->a = std::move(e);
      if (IsName("else")) {
        ++i_;
        n->b = CondExpr(true);
      }
      e = std::move(n);
    }
    return e;
  }

  NodePtr Or() {
    auto l = And();
    while (IsName("or")) {
      auto n = New(NK::kOr);
      ++i_;
      n->a = std::move(l);
      n->b = And();
      l = std::move(n);
    }
    return l;
  }
  NodePtr And() {
    auto l = Not();
    while (IsName("and")) {
      auto n = New(NK::kAnd);
      ++i_;
      n->a = std::move(l);
      n->b = Not();
      l = std::move(n);
    }
    return l;
  }
  NodePtr Not() {
    if (IsName("not")) {
      auto n = New(NK::kNot);
      ++i_;
      n->a = Not();
      return n;
    }
    return Comparison();
  }
  NodePtr Comparison() {
    auto first = Math1();
    NodePtr n;
    while (true) {
      std::string op;
      if (Cur().type == TK::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
           Cur().text == "<=" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().type == TK::kName && Peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!n) {
        n = New(NK::kCompare);
        n->a = std::move(first);
      }
      n->ops.push_back(op);
      n->args.push_back(Math1());
    }
    return n ? std::move(n) : std::move(first);
  }
  NodePtr Binary(NodePtr l, const std::string& op, NodePtr r) {
    auto n = New(NK::kBinary);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }
  NodePtr Math1() {
    auto l = Concat();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = t_[i_++].text;
      l = Binary(std::move(l), op, Concat());
    }
    return l;
  }
  NodePtr Concat() {
    auto first = Math2();
    if (!IsOp("~")) return first;
    auto n = New(NK::kConcat);
    n->args.push_back(std::move(first));
    while (IsOp("~")) {
      ++i_;
      n->args.push_back(Math2());
    }
    return n;
  }
  NodePtr Math2() {
    auto l = Pow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = t_[i_++].text;
      l = Binary(std::move(l), op, Pow());
    }
    return l;
  }
  NodePtr Pow() {
    auto l = Unary(true);
    while (IsOp("**")) {
      ++i_;
      l = Binary(std::move(l), "**", Unary(true));
    }
    return l;
  }
  NodePtr Unary(bool with_filter) {
    NodePtr n;
    if (IsOp("-") || IsOp("+")) {
      n = New(IsOp("-") ? NK::kNeg : NK::kPos);
      ++i_;
      n->a = Unary(false);
    } else {
      n = Primary();
    }
    n = Postfix(std::move(n));
    if (with_filter) n = FilterExpr(std::move(n));
    return n;
  }

  NodePtr Primary() {
    const Token& tok = Cur();
    if (tok.type == TK::kName) {
      const std::string& s = tok.text;
      auto n = New(NK::kConst);
      ++i_;
      if (s == "true" || s == "True") { n->value = Value(true); return n; }
      if (s == "false" || s == "False") { n->value = Value(false); return n; }
      if (s == "none" || s == "None") { n->value = Value::None(); return n; }
      n->kind = NK::kName;
      n->name = s;
      return n;
    }
    if (tok.type == TK::kString) {
      auto n = New(NK::kConst);
      std::string s;
      while (Cur().type == TK::kString) s += t_[i_++].text;
      n->value = Value(std::move(s));
      return n;
    }
    if (tok.type == TK::kInt || tok.type == TK::kFloat) {
      auto n = New(NK::kConst);
      try {
        n->value = tok.type == TK::kInt ? Value(static_cast<int64_t>(std::stoll(tok.text)))
                                        : Value(std::stod(tok.text));
      } catch (const std::exception&) {
        Error("number out of range: " + tok.text);
      }
      ++i_;
      return n;
    }
    if (IsOp("(")) {
      auto t = New(NK::kTuple);
      ++i_;
      if (IsOp(")")) {
        ++i_;
        return t;
      }
      auto first = Expr();
      if (IsOp(")")) {
        ++i_;
        return first;
      }
      t->args.push_back(std::move(first));
      while (IsOp(",")) {
        ++i_;
        if (IsOp(")")) break;
        t->args.push_back(Expr());
      }
      ExpectOp(")");
      return t;
    }
    if (IsOp("[")) {
      auto n = New(NK::kList);
      ++i_;
      while (!IsOp("]")) {
        if (!n->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        n->args.push_back(Expr());
      }
      ++i_;
      return n;
    }
    if (IsOp("{")) {
      auto n = New(NK::kDict);
      ++i_;
      while (!IsOp("}")) {
        if (!n->args.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        n->args.push_back(Expr());
        ExpectOp(":");
        n->kw_args.push_back(Expr());
      }
      ++i_;
      return n;
    }
    Error("unexpected '" + Describe() + "'");
  }

  NodePtr Postfix(NodePtr n) {
    while (true) {
      if (IsOp(".")) {
        auto g = New(NK::kGetAttr);
        ++i_;
        if (Cur().type == TK::kName) {
          g->name = t_[i_++].text;
        } else if (Cur().type == TK::kInt) {  // x.0 is x[0]
          g->kind = NK::kGetItem;
          g->b = New(NK::kConst);
          g->b->value = Value(static_cast<int64_t>(std::stoll(t_[i_++].text)));
        } else {
          Error("expected name or number after '.'");
        }
        g->a = std::move(n);
        n = std::move(g);
      } else if (IsOp("[")) {
        ++i_;
        n = Subscript(std::move(n));
      } else if (IsOp("(")) {
        n = Call(std::move(n));
      } else {
        return n;
      }
    }
  }

  NodePtr Subscript(NodePtr obj) {
    auto n = New(NK::kGetItem);
    n->a = std::move(obj);
    NodePtr parts[3];
    int k = 0;
    bool slice = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        slice = true;
        ++i_;
        if (++k > 2) Error("invalid slice");
        continue;
      }
      if (IsOp(",")) Error("tuple subscripts are not supported");
      if (parts[k]) Error("expected ']'");
      parts[k] = Expr();
    }
    ++i_;
    if (!slice) {
      if (!parts[0]) Error("expected subscript expression");
      n->b = std::move(parts[0]);
      return n;
    }
    n->kind = NK::kSlice;
    n->args.resize(3);
    for (int j = 0; j < 3; ++j) n->args[static_cast<size_t>(j)] = std::move(parts[j]);
    return n;
  }

  // ( args ) into `n` (args, kw_names/kw_args).
  void CallArgs(Node* n) {
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (IsOp(")")) break;
      if (Cur().type == TK::kName && Peek().type == TK::kOp && Peek().text == "=") {
        n->kw_names.push_back(t_[i_].text);
        i_ += 2;
        n->kw_args.push_back(Expr());
      } else {
        if (!n->kw_names.empty()) Error("positional argument follows keyword argument");
        n->args.push_back(Expr());
      }
    }
    ++i_;
  }

  NodePtr Call(NodePtr fn) {
    auto n = New(NK::kCall);
    n->line = fn->line;
    n->col = fn->col;
    n->a = std::move(fn);
    CallArgs(n.get());
    return n;
  }

  // | name(args) ... applied to `n` (null: the body of a filter block / set block).
  NodePtr FilterChain(NodePtr n, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || IsOp("|")) {
      if (!(first && !leading_pipe)) ++i_;
      first = false;
      auto f = New(NK::kFilter);
      f->name = ExpectName();
      while (IsOp(".")) {
        ++i_;
        f->name += '.';
        f->name += ExpectName();
      }
      if (!HasFilter(f->name)) {
        if (if_depth_ == 0) Error("No filter named '" + f->name + "'.");
        f->soft = true;
      }
      if (IsOp("(")) CallArgs(f.get());
      f->a = std::move(n);
      n = std::move(f);
    }
    return n;
  }

  NodePtr FilterExpr(NodePtr n) {
    while (true) {
      if (IsOp("|")) {
        n = FilterChain(std::move(n));
      } else if (IsName("is")) {
        auto t = New(NK::kTest);
        ++i_;
        if (IsName("not")) {
          ++i_;
          t->flag = true;
        }
        t->name = ExpectName();
        if (!HasTest(t->name)) {
          if (if_depth_ == 0) Error("No test named '" + t->name + "'.");
          t->soft = true;
        }
        if (IsOp("(")) {
          CallArgs(t.get());
        } else if ((Cur().type == TK::kName || Cur().type == TK::kString ||
                    Cur().type == TK::kInt || Cur().type == TK::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) Error("You cannot chain multiple tests with is");
          t->args.push_back(Postfix(Primary()));
        }
        t->a = std::move(n);
        n = std::move(t);
      } else if (IsOp("(")) {
        n = Call(std::move(n));
      } else {
        return n;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int if_depth_ = 0;
  std::string end_tag_;
};

}  // namespace

std::unique_ptr<Program> ParseProgram(std::string_view source) {
  return Parser(Lex(source)).Run();
}

}  // namespace kvtier::jinja
