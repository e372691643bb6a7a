// Interpreter: statements (exec_*) and expressions (eval_*) over the tree from parser.cpp. Operators, filters,
// tests and methods live in builtins.h. Test: tests/unit/frontends/text/chat_template_test.cpp.
#include "frontends/text/chat_template/interpreter.h"

#include "frontends/text/chat_template/builtins.h"

namespace mmserve::chat_template {

Status Interpreter::render(const Body& body, Dict variables, std::string& out) {
  frames_.clear();
  frames_.push_back(std::make_shared<Frame>());
  for (auto& [k, v] : variables.items) frames_[0]->insert_or_assign(k, std::move(v));
  flow_ = Flow::kNormal;
  steps_ = 0;
  call_depth_ = 0;
  error_located_ = false;
  return exec(body, out);
}

Status Interpreter::charge(int64_t units) {
  steps_ += units;
  if (steps_ > limits_.steps_max) {
    return resource_exhausted("RuntimeError: the template did more than " + std::to_string(limits_.steps_max) +
                              " steps (a runaway loop?)");
  }
  return ok_status();
}

Status Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.output_bytes_max) {
    return too_large("RuntimeError: the template's output or a string it built exceeds " +
                     std::to_string(limits_.output_bytes_max) + " bytes");
  }
  return ok_status();
}

Value Interpreter::lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    const auto found = (*it)->find(name);
    if (found != (*it)->end()) return found->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

// --- statements -----------------------------------------------------------------------------------------

Status Interpreter::exec(const Body& body, std::string& out) {
  for (const auto& node : body) {
    RETURN_IF_ERROR(step());
    RETURN_IF_ERROR(exec_node(*node, out));
    if (flow_ != Flow::kNormal) return ok_status();
  }
  return ok_status();
}

Status Interpreter::exec_node(const Node& n, std::string& out) {
  switch (n.kind) {
    case NodeKind::kData: out += n.text; return check_size(out.size());
    case NodeKind::kOutput: {
      ASSIGN_OR_RETURN(Value v, eval(*n.expr));
      const size_t before = out.size();
      out += to_str(v);
      RETURN_IF_ERROR(charge(static_cast<int64_t>((out.size() - before) / 32)));
      return check_size(out.size());
    }
    case NodeKind::kIf:
      for (size_t i = 0; i < n.conditions.size(); ++i) {
        ASSIGN_OR_RETURN(Value cond, eval(*n.conditions[i]));
        if (cond.truthy()) return exec(n.bodies[i], out);
      }
      return exec(n.else_body, out);
    case NodeKind::kFor: return exec_for(n, out);
    case NodeKind::kSet: return exec_set(n);
    case NodeKind::kSetBlock: {
      std::string text;
      RETURN_IF_ERROR(exec_scoped(n.body, text));
      ASSIGN_OR_RETURN(Value v, apply_filter_chain(n.filters, Value::string(std::move(text))));
      assign(n.targets[0], std::move(v));
      return ok_status();
    }
    case NodeKind::kFilterBlock: {
      std::string text;
      RETURN_IF_ERROR(exec_scoped(n.body, text));
      ASSIGN_OR_RETURN(Value v, apply_filter_chain(n.filters, Value::string(std::move(text))));
      out += to_str(v);
      return check_size(out.size());
    }
    case NodeKind::kMacro: return exec_macro_definition(n);
    case NodeKind::kBreak: flow_ = Flow::kBreak; return ok_status();
    case NodeKind::kContinue: flow_ = Flow::kContinue; return ok_status();
    case NodeKind::kGeneration:  // HF's AssistantTracker renders the body (a caller() macro) unchanged
      return exec_scoped(n.body, out);
  }
  return ok_status();
}

StatusOr<Value> Interpreter::apply_filter_chain(const std::vector<ExprPtr>& filters, Value v) {
  for (const auto& f : filters) {
    CallArgs args;
    RETURN_IF_ERROR(eval_args(*f, 1, args));
    ASSIGN_OR_RETURN(v, apply_filter(f->name, v, args, *this));
  }
  return v;
}

Status Interpreter::assign_targets(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    assign(targets[0], v);
    return ok_status();
  }
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
  if (items.size() != targets.size()) {
    return invalid_argument(items.size() < targets.size()
                                ? "ValueError: not enough values to unpack (expected " +
                                      std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")"
                                : "ValueError: too many values to unpack (expected " + std::to_string(targets.size()) +
                                      ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  return ok_status();
}

// A fresh scope per iteration holding the targets and `loop` (index, index0, revindex, revindex0, first, last,
// length, previtem, nextitem, depth, depth0, cycle). The `if` filter runs first, so loop.length counts what
// passes it; `else` runs when nothing does.
Status Interpreter::exec_for(const Node& n, std::string& out) {
  ASSIGN_OR_RETURN(Value iterable, eval(*n.expr));
  ASSIGN_OR_RETURN(std::vector<Value> items, iterate(iterable));
  RETURN_IF_ERROR(charge(static_cast<int64_t>(items.size())));
  if (n.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      RETURN_IF_ERROR(step());
      frames_.push_back(std::make_shared<Frame>());
      Status st = assign_targets(n.targets, item);
      StatusOr<Value> keep = st.ok() ? eval(*n.condition) : StatusOr<Value>(st);
      frames_.pop_back();
      if (!keep.ok()) return keep.status();
      if (keep->truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec_scoped(n.else_body, out);  // the else body has a scope of its own too
  const auto length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    RETURN_IF_ERROR(step());
    Dict loop;
    loop.items = {
        {"index", Value::integer(i + 1)},
        {"index0", Value::integer(i)},
        {"revindex", Value::integer(length - i)},
        {"revindex0", Value::integer(length - i - 1)},
        {"first", Value::boolean(i == 0)},
        {"last", Value::boolean(i == length - 1)},
        {"length", Value::integer(length)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item")},
        {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item")},
        {"cycle", Value::function("loop.cycle",
                                  [i](CallArgs& args, Interpreter&) -> StatusOr<Value> {
                                    if (args.positional.empty()) return type_error("no items for cycling given");
                                    return args.positional[static_cast<size_t>(i) % args.positional.size()];
                                  })},
    };
    frames_.push_back(std::make_shared<Frame>());
    Status st = assign_targets(n.targets, items[static_cast<size_t>(i)]);
    assign("loop", Value::dict(std::move(loop)));
    if (st.ok()) st = exec(n.body, out);
    frames_.pop_back();
    RETURN_IF_ERROR(st);
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  return ok_status();
}

namespace {

// `visited` counts the containers looked at (charged as work by the caller).
bool holds_namespace(const Value& v, int depth, int64_t& visited) {
  ++visited;
  if (v.kind() == Kind::kNamespace) return true;
  if (depth > 600) return true;
  if (v.is_list()) {
    for (const auto& item : v.as_list()) {
      if (item.depth() > 0 && holds_namespace(item, depth + 1, visited)) return true;
    }
  } else if (v.is_dict()) {
    for (const auto& [k, item] : v.as_dict().items) {
      if (item.depth() > 0 && holds_namespace(item, depth + 1, visited)) return true;
    }
  }
  return false;
}

// What touching a value costs: its items, or its bytes / 32.
int64_t work_size(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(v.as_string().size() / 32);
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  return 0;
}

}  // namespace

Status Interpreter::exec_set(const Node& n) {
  ASSIGN_OR_RETURN(Value v, eval(*n.expr));
  if (n.attribute.empty()) return assign_targets(n.targets, v);
  const Value target = lookup(n.targets[0]);
  if (target.kind() != Kind::kNamespace) {
    return invalid_argument("TemplateRuntimeError: cannot assign attribute on non-namespace object");
  }
  int64_t visited = 0;
  const bool nested = holds_namespace(v, 0, visited);
  RETURN_IF_ERROR(charge(visited));
  if (nested) {  // no namespace inside a namespace: it could hold itself (a cycle)
    return unimplemented(
        "TemplateRuntimeError: storing a namespace (or a container of one) in a namespace is not supported");
  }
  target.namespace_entries().set(n.attribute, std::move(v));
  return ok_status();
}

Status Interpreter::exec_scoped(const Body& body, std::string& out) {
  frames_.push_back(std::make_shared<Frame>());
  Status st = exec(body, out);
  frames_.pop_back();
  return st;
}

Status Interpreter::exec_macro_definition(const Node& n) {
  const Node* macro = &n;
  Closure closure(frames_.begin(), frames_.end());
  assign(n.text, Value::function(n.text, [macro, closure](CallArgs& args, Interpreter& in) {
           return in.call_macro(*macro, closure, args);
         }));
  return ok_status();
}

StatusOr<Value> Interpreter::call_macro(const Node& macro, const Closure& closure, CallArgs& args) {
  if (call_depth_ >= limits_.call_depth_max) {
    return resource_exhausted("RecursionError: macro calls nested deeper than " +
                              std::to_string(limits_.call_depth_max));
  }
  if (args.positional.size() > macro.params.size()) {
    return type_error("macro '" + macro.text + "' takes not more than " + std::to_string(macro.params.size()) +
                      " argument(s)");
  }
  auto frame = std::make_shared<Frame>();
  for (auto& [key, value] : args.keyword) {
    bool known = false;
    for (const auto& p : macro.params) known = known || p.first == key;
    if (!known) return type_error("macro '" + macro.text + "' takes no keyword argument '" + key + "'");
  }
  std::vector<std::shared_ptr<Frame>> saved = frames_;
  frames_.clear();
  for (const auto& weak : closure) {
    if (auto f = weak.lock()) frames_.push_back(std::move(f));  // a loop's scope may be gone by now
  }
  if (frames_.empty() || frames_[0] != saved[0]) frames_.insert(frames_.begin(), saved[0]);
  frames_.push_back(frame);
  ++call_depth_;
  std::string out;
  Status st;
  for (size_t i = 0; i < macro.params.size() && st.ok(); ++i) {
    const auto& [name, def] = macro.params[i];
    Value v = Value::undefined("'" + name + "' is undefined");
    if (i < args.positional.size()) {
      v = args.positional[i];
    } else {
      bool given = false;
      for (auto& [key, value] : args.keyword) {
        if (key == name) v = value, given = true;
      }
      if (!given && def) {
        StatusOr<Value> d = eval(*def);
        if (!d.ok())
          st = d.status();
        else
          v = std::move(d).value();
      }
    }
    frame->insert_or_assign(name, std::move(v));
  }
  if (st.ok()) st = exec(macro.body, out);
  --call_depth_;
  frames_ = std::move(saved);
  flow_ = Flow::kNormal;
  RETURN_IF_ERROR(st);
  return Value::string(std::move(out));
}

StatusOr<Value> Interpreter::call(const Value& fn, CallArgs& args) {
  RETURN_IF_ERROR(step());
  if (fn.is_undefined()) return undefined_error(fn);
  if (fn.kind() != Kind::kCallable) return type_error("'" + fn.type_name() + "' object is not callable");
  return fn.as_callable().call(args, *this);
}

// --- expressions ----------------------------------------------------------------------------------------

// Evaluates and, on the first failure, appends where in the template it happened.
StatusOr<Value> Interpreter::eval(const Expr& e) {
  StatusOr<Value> r = eval_inner(e);
  if (r.ok() && r->depth() > limits_.value_depth_max) {
    r = invalid_argument("RecursionError: a value nested deeper than " + std::to_string(limits_.value_depth_max) +
                         " levels");
  }
  if (!r.ok() && !error_located_) {
    error_located_ = true;
    const Status& s = r.status();
    if (s.message().rfind("TemplateError: ", 0) == 0) return s;  // raise_exception: its message alone
    return Status(s.code(),
                  s.message() + " (line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ")");
  }
  return r;
}

Status Interpreter::eval_args(const Expr& e, size_t first, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
    out.positional.push_back(std::move(v));
  }
  for (const auto& [key, expr] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, eval(*expr));
    out.keyword.emplace_back(key, std::move(v));
  }
  return ok_status();
}

StatusOr<Value> Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) {
        ASSIGN_OR_RETURN(Value v, eval(*a));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
        ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
        if (!k.is_string()) return unimplemented("TypeError: dict literals with non-string keys are not supported");
        d.set(k.as_string(), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      if (obj.is_undefined()) return undefined_error(obj);
      Value attribute = get_attribute(obj, e.name);
      if (attribute.kind() == Kind::kCallable) RETURN_IF_ERROR(charge(work_size(obj)));  // a method will scan it
      return attribute;
    }
    case ExprKind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      if (obj.is_undefined()) return undefined_error(obj);
      ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
      if (obj.is_string()) RETURN_IF_ERROR(charge(work_size(obj)));
      return get_item(obj, key);
    }
    case ExprKind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
      if (obj.is_undefined()) return undefined_error(obj);
      Value bounds[3];
      for (size_t i = 0; i < 3; ++i) {
        if (e.args[i + 1]) {
          ASSIGN_OR_RETURN(bounds[i], eval(*e.args[i + 1]));
        }
      }
      RETURN_IF_ERROR(charge(work_size(obj)));
      return slice(obj, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      ASSIGN_OR_RETURN(Value fn, eval(*e.args[0]));
      CallArgs args;
      RETURN_IF_ERROR(eval_args(e, 1, args));
      return call(fn, args);
    }
    case ExprKind::kFilter: {
      ASSIGN_OR_RETURN(Value input, eval(*e.args[0]));
      CallArgs args;
      RETURN_IF_ERROR(eval_args(e, 1, args));
      RETURN_IF_ERROR(charge(1 + work_size(input)));
      return apply_filter(e.name, input, args, *this);
    }
    case ExprKind::kTest: {
      ASSIGN_OR_RETURN(Value input, eval(*e.args[0]));
      CallArgs args;
      RETURN_IF_ERROR(eval_args(e, 1, args));
      ASSIGN_OR_RETURN(bool result, apply_test(e.name, input, args, *this));
      return Value::boolean(result != e.negated);
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return negate(v, e.kind == ExprKind::kNeg);
    }
    case ExprKind::kNot: {
      ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return Value::boolean(!v.truthy());
    }
    case ExprKind::kBinary: {
      ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
      return binary_op(e.name, a, b, *this);
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kAnd:
    case ExprKind::kOr: {  // Python returns the deciding operand, not a bool
      ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      if (a.truthy() == (e.kind == ExprKind::kOr)) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kCond: {
      ASSIGN_OR_RETURN(Value cond, eval(*e.args[1]));
      if (cond.truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined("the inline if expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  return internal_error("unknown expression kind");
}

// a < b <= c is (a < b) and (b <= c), each operand evaluated once.
StatusOr<Value> Interpreter::eval_compare(const Expr& e) {
  ASSIGN_OR_RETURN(Value left, eval(*e.args[0]));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1]));
    RETURN_IF_ERROR(charge(1 + work_size(left) + work_size(right)));
    const std::string& op = e.ops[i];
    bool result = false;
    if (op == "==" || op == "!=") {
      result = equals(left, right) == (op == "==");
    } else if (op == "in" || op == "notin") {
      ASSIGN_OR_RETURN(bool in, contains(right, left));
      result = in == (op == "in");
    } else {
      if (left.is_undefined()) return undefined_error(left);
      if (right.is_undefined()) return undefined_error(right);
      ASSIGN_OR_RETURN(int c, compare(left, right, op.c_str()));
      result = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace mmserve::chat_template
