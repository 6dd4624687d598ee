// The interpreter: statements write into a string, expressions evaluate to Values with
// jinja2's scoping (a for iteration, a macro call and a block capture get their own frame;
// if does not), and Template's Parse / Render, which turn JinjaError into a Status.
#include <ctime>

#include "jinja/internal.h"

namespace kvtier::jinja {

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;

  const Value* Find(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
      for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value v) {
    for (auto& [k, x] : vars) {
      if (k == name) {
        x = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

std::vector<std::pair<std::string, Value>> Globals(const RenderOptions& o);

class Interp {
 public:
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Interp() = default;
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;
  // A macro holds the frame it was defined in, and that frame holds the macro: the cycles are
  // broken here, once the render is over.
  ~Interp() {
    for (const auto& f : frames_) f->vars.clear();
  }

  std::string Render(const Program& p, const Value& vars, const RenderOptions& o) {
    auto globals = Child(nullptr);
    globals->vars = Globals(o);
    frame_ = Child(globals);
    for (const auto& [k, v] : vars.entries()) {
      if (k.is_string()) frame_->Set(k.str(), v);
    }
    std::string out;
    Exec(p.body, out);
    return out;
  }

  Value Eval(const Node& n) {
    try {
      return EvalImpl(n);
    } catch (JinjaError& e) {
      if (e.line == 0) {
        e.line = n.line;
        e.col = n.col;
      }
      throw;
    }
  }

  Flow Exec(const std::vector<NodePtr>& body, std::string& out) {
    for (const NodePtr& s : body) {
      Flow f;
      try {
        f = ExecOne(*s, out);
      } catch (JinjaError& e) {
        if (e.line == 0) {
          e.line = s->line;
          e.col = s->col;
        }
        throw;
      }
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  // Runs `body` in a child frame of `parent` and returns what it wrote.
  std::string RenderIn(const std::vector<NodePtr>& body, std::shared_ptr<Frame> frame) {
    auto saved = frame_;
    frame_ = std::move(frame);
    std::string out;
    try {
      Exec(body, out);
    } catch (...) {
      frame_ = saved;
      throw;
    }
    frame_ = saved;
    return out;
  }

 private:
  std::shared_ptr<Frame> Child(std::shared_ptr<Frame> parent) {
    auto f = std::make_shared<Frame>();
    f->parent = std::move(parent);
    frames_.push_back(f);
    return f;
  }

  Args EvalArgs(const Node& n) {
    Args a;
    for (const auto& x : n.args) a.pos.push_back(Eval(*x));
    for (size_t i = 0; i < n.kw_names.size(); ++i) a.kw.emplace_back(n.kw_names[i], Eval(*n.kw_args[i]));
    return a;
  }

  // A filter chain node applied to `input` (the innermost filter's operand is null).
  Value ApplyChain(const Node& f, const Value& input) {
    const Value v = f.a ? (f.a->kind == NK::kFilter ? ApplyChain(*f.a, input) : Eval(*f.a)) : input;
    if (f.soft) Fail("No filter named '" + f.name + "'.");
    Args args = EvalArgs(f);
    return ApplyFilter(*this, f.name, v, args);
  }

  void Assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      frame_->Set(targets[0], v);
      return;
    }
    std::vector<Value> items = Iterate(v);
    if (items.size() != targets.size()) {
      Fail(items.size() < targets.size()
               ? "not enough values to unpack (expected " + std::to_string(targets.size()) +
                     ", got " + std::to_string(items.size()) + ")"
               : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) frame_->Set(targets[i], items[i]);
  }

  Value MakeMacro(const Node& n, std::shared_ptr<Frame> def, const std::string& name) {
    const Node* node = &n;
    return MakeFunction(name, [this, node, def, name](Args& args) -> Value {
      // A template that calls itself without end fails instead of exhausting the stack.
      if (depth_ >= kMaxCallDepth) Fail("maximum recursion depth exceeded in macro '" + name + "'");
      struct Depth {
        int& d;
        explicit Depth(int& x) : d(++x) {}
        ~Depth() { --d; }
      } depth(depth_);
      auto f = Child(def);
      const auto& params = node->kw_names;
      if (args.pos.size() > params.size() && !node->uses_varargs) {
        Fail("macro '" + name + "' takes not more than " + std::to_string(params.size()) +
             " argument(s)");
      }
      std::vector<bool> set(params.size(), false);
      for (size_t i = 0; i < params.size() && i < args.pos.size(); ++i) {
        f->Set(params[i], args.pos[i]);
        set[i] = true;
      }
      std::vector<std::pair<Value, Value>> extra_kw;
      Value caller;
      for (auto& [k, v] : args.kw) {
        bool found = false;
        for (size_t i = 0; i < params.size(); ++i) {
          if (params[i] == k) {
            if (set[i]) Fail("macro '" + name + "' got multiple values for argument '" + k + "'");
            f->Set(k, v);
            set[i] = found = true;
          }
        }
        if (found) continue;
        if (k == "caller" && node->uses_caller) {
          caller = v;
        } else if (node->uses_kwargs) {
          extra_kw.emplace_back(Value(k), v);
        } else {
          Fail("macro '" + name + "' takes no keyword argument '" + k + "'");
        }
      }
      auto saved = frame_;
      frame_ = f;
      try {
        for (size_t i = 0; i < params.size(); ++i) {
          if (set[i]) continue;
          f->Set(params[i], node->kw_args[i] ? Eval(*node->kw_args[i])
                                             : Value::Undefined("parameter '" + params[i] +
                                                                "' was not provided"));
        }
      } catch (...) {
        frame_ = saved;
        throw;
      }
      frame_ = saved;
      std::vector<Value> rest;
      for (size_t i = params.size(); i < args.pos.size(); ++i) rest.push_back(args.pos[i]);
      f->Set("varargs", Value::List(std::move(rest), true));
      f->Set("kwargs", Value::Dict(std::move(extra_kw)));
      if (node->uses_caller) f->Set("caller", caller);
      return Value(RenderIn(node->args, f));
    });
  }

  Flow ExecFor(const Node& n, std::string& out) {
    const Value iterable = Eval(*n.a);
    if (iterable.is_none()) Fail("'NoneType' object is not iterable");
    std::vector<Value> items = Iterate(iterable);
    const auto outer = frame_;
    if (n.c) {  // {% for x in xs if cond %}: the condition sees the target only
      std::vector<Value> kept;
      for (const Value& it : items) {
        frame_ = Child(outer);
        try {
          Assign(n.kw_names, it);
          if (Truthy(Eval(*n.c))) kept.push_back(it);
        } catch (...) {
          frame_ = outer;
          throw;
        }
        frame_ = outer;
      }
      items = std::move(kept);
    }
    const auto len = static_cast<int64_t>(items.size());
    Value last_changed = Value::Undefined("");
    auto changed_state = std::make_shared<std::vector<Value>>();
    for (int64_t i = 0; i < len; ++i) {
      frame_ = Child(outer);
      try {
        Assign(n.kw_names, items[static_cast<size_t>(i)]);
        std::vector<std::pair<Value, Value>> loop = {
            {Value("index"), Value(i + 1)},
            {Value("index0"), Value(i)},
            {Value("revindex"), Value(len - i)},
            {Value("revindex0"), Value(len - i - 1)},
            {Value("first"), Value(i == 0)},
            {Value("last"), Value(i == len - 1)},
            {Value("length"), Value(len)},
            {Value("depth"), Value(int64_t{1})},
            {Value("depth0"), Value(int64_t{0})},
            {Value("previtem"), i > 0 ? items[static_cast<size_t>(i - 1)]
                                      : Value::Undefined("there is no previous item")},
            {Value("nextitem"), i + 1 < len ? items[static_cast<size_t>(i + 1)]
                                            : Value::Undefined("there is no next item")},
            {Value("cycle"), MakeFunction("cycle", [i](Args& a) -> Value {
               if (a.pos.empty()) Fail("no items for cycling given");
               return a.pos[static_cast<size_t>(i) % a.pos.size()];
             })},
            {Value("changed"), MakeFunction("changed", [changed_state](Args& a) -> Value {
               Value now = Value::List(a.pos);
               if (!changed_state->empty() && Equal((*changed_state)[0], now)) return Value(false);
               changed_state->assign(1, now);
               return Value(true);
             })},
        };
        frame_->Set("loop", Value::Namespace(std::move(loop)));
        const Flow f = Exec(n.args, out);
        frame_ = outer;
        if (f == Flow::kBreak) break;
      } catch (...) {
        frame_ = outer;
        throw;
      }
    }
    frame_ = outer;
    if (len == 0 && !n.else_body.empty()) return Exec(n.else_body, out);
    return Flow::kNormal;
  }

  Flow ExecOne(const Node& n, std::string& out) {
    switch (n.kind) {
      case NK::kOutput: out += n.value.str(); return Flow::kNormal;
      case NK::kPrint: out += ToStr(Eval(*n.a)); return Flow::kNormal;
      case NK::kIf:
        return Truthy(Eval(*n.a)) ? Exec(n.args, out) : Exec(n.else_body, out);
      case NK::kFor: return ExecFor(n, out);
      case NK::kBreak: return Flow::kBreak;
      case NK::kContinue: return Flow::kContinue;
      case NK::kSet: {
        Value v = Eval(*n.a);
        if (n.flag) {
          const Value* ns = frame_->Find(n.kw_names[0]);
          if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
            Fail("cannot assign attribute on non-namespace object");
          }
          ns->dict_rep()->Set(Value(n.kw_names[1]), std::move(v));
        } else {
          Assign(n.kw_names, v);
        }
        return Flow::kNormal;
      }
      case NK::kSetBlock: {
        Value v(RenderIn(n.args, Child(frame_)));
        if (n.a) v = ApplyChain(*n.a, v);
        frame_->Set(n.kw_names[0], v);
        return Flow::kNormal;
      }
      case NK::kMacro:
        frame_->Set(n.name, MakeMacro(n, frame_, n.name));
        return Flow::kNormal;
      case NK::kCallBlock: {
        const Node& call = *n.a;
        Value fn = Eval(*call.a);
        Args args = EvalArgs(call);
        args.kw.emplace_back("caller", MakeMacro(n, frame_, "caller"));
        out += ToStr(CallValue(*this, fn, args));
        return Flow::kNormal;
      }
      case NK::kFilterBlock: {
        const Value body(RenderIn(n.args, Child(frame_)));
        out += ToStr(ApplyChain(*n.a, body));
        return Flow::kNormal;
      }
      case NK::kScope: out += RenderIn(n.args, Child(frame_)); return Flow::kNormal;
      default: Fail("internal error: not a statement");
    }
  }

  Value EvalImpl(const Node& n) {
    switch (n.kind) {
      case NK::kConst: return n.value;
      case NK::kName: {
        const Value* v = frame_->Find(n.name);
        return v ? *v : Value::Undefined("'" + n.name + "' is undefined");
      }
      case NK::kList:
      case NK::kTuple: {
        std::vector<Value> items;
        for (const auto& x : n.args) items.push_back(Eval(*x));
        return Value::List(std::move(items), n.kind == NK::kTuple);
      }
      case NK::kDict: {
        std::vector<std::pair<Value, Value>> items;
        for (size_t i = 0; i < n.args.size(); ++i) items.emplace_back(Eval(*n.args[i]), Eval(*n.kw_args[i]));
        return Value::Dict(std::move(items));
      }
      case NK::kGetAttr: return GetAttr(Eval(*n.a), n.name);
      case NK::kGetItem: return GetItem(Eval(*n.a), Eval(*n.b));
      case NK::kSlice: {
        const Value obj = Eval(*n.a);
        Value p[3];
        for (size_t i = 0; i < 3; ++i) p[i] = n.args[i] ? Eval(*n.args[i]) : Value::None();
        return Slice(obj, p[0], p[1], p[2]);
      }
      case NK::kCall: {
        const Value fn = Eval(*n.a);
        Args args = EvalArgs(n);
        return CallValue(*this, fn, args);
      }
      case NK::kFilter: return ApplyChain(n, Value());
      case NK::kTest: {
        const Value v = Eval(*n.a);
        if (n.soft) Fail("No test named '" + n.name + "'.");
        Args args = EvalArgs(n);
        return Value(ApplyTest(*this, n.name, v, args) != n.flag);
      }
      case NK::kNeg:
      case NK::kPos: {
        const Value v = Eval(*n.a);
        if (v.is_undefined()) ThrowUndefined(v);
        if (!v.is_number()) Fail("bad operand type for unary " + std::string(n.kind == NK::kNeg ? "-" : "+") + ": '" + TypeName(v) + "'");
        if (n.kind == NK::kPos) return v.kind() == Value::Kind::kBool ? Value(v.as_int()) : v;
        return v.kind() == Value::Kind::kFloat ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case NK::kNot: return Value(!Truthy(Eval(*n.a)));
      case NK::kAnd: {
        Value l = Eval(*n.a);
        return Truthy(l) ? Eval(*n.b) : l;
      }
      case NK::kOr: {
        Value l = Eval(*n.a);
        return Truthy(l) ? l : Eval(*n.b);
      }
      case NK::kBinary: return BinaryOp(n.name, Eval(*n.a), Eval(*n.b));
      case NK::kCompare: {
        Value l = Eval(*n.a);
        for (size_t i = 0; i < n.ops.size(); ++i) {
          Value r = Eval(*n.args[i]);
          const std::string& op = n.ops[i];
          bool ok;
          if (op == "==") ok = Equal(l, r);
          else if (op == "!=") ok = !Equal(l, r);
          else if (op == "in" || op == "notin") {
            Args a;
            a.pos.push_back(r);
            ok = ApplyTest(*this, "in", l, a) == (op == "in");
          } else {
            const int c = Compare(l, r, op);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case NK::kCondExpr:
        if (Truthy(Eval(*n.c))) return Eval(*n.a);
        return n.b ? Eval(*n.b) : Value::Undefined("the inline if-expression evaluated to false and no else section was defined.");
      case NK::kConcat: {
        std::string s;
        for (const auto& x : n.args) s += ToStr(Eval(*x));
        return Value(std::move(s));
      }
      default: Fail("internal error: not an expression");
    }
  }

  static constexpr int kMaxCallDepth = 200;
  std::vector<std::shared_ptr<Frame>> frames_;  // every frame of this render
  std::shared_ptr<Frame> frame_;
  int depth_ = 0;
};

Value CallValue(Interp& /*in*/, const Value& fn, Args& args) {
  if (fn.kind() == Value::Kind::kCallable) return fn.callable()->fn(args);
  if (fn.is_undefined()) ThrowUndefined(fn);
  std::string msg = "'";
  msg += TypeName(fn);
  msg += "' object is not callable";
  Fail(std::move(msg));
}

namespace {
Status ToStatus(const JinjaError& e) {
  std::string msg = "template:" + std::to_string(e.line) + ":" + std::to_string(e.col) + ": " + e.message;
  return Status::InvalidArgument(std::move(msg));
}
}  // namespace

Result<Template> Template::Parse(std::string_view source) {
  try {
    Template t;
    t.program_ = ParseProgram(source);
    return t;
  } catch (const JinjaError& e) {
    return ToStatus(e);
  }
}

Result<std::string> Template::Render(const Value& variables, const RenderOptions& options) const {
  if (!program_) return Status::InvalidArgument("template: not parsed");
  try {
    Interp in;
    return in.Render(*program_, variables, options);
  } catch (const JinjaError& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error from huge repeats
    return Status::InvalidArgument(std::string("template: ") + e.what());
  }
}

}  // namespace kvtier::jinja
