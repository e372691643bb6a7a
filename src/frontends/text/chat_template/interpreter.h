// The chat-template interpreter: renders a parsed template (ast.h) against a set of variables.
//
// Scoping follows Jinja2: `set` writes the innermost scope; each for-loop iteration has a fresh scope (so a set
// inside a loop is gone after it, which is why templates use namespace()); so do block sets, filter blocks and
// {% generation %} bodies; `if` opens none; a macro runs in a scope of its own over the scopes it was defined in
// (the top level, an enclosing loop's), as they are when it is called. Work is bounded:
// loop iterations and evaluation steps, macro call depth and the output's size each have a limit, past which
// rendering stops with a Status (a hostile template can neither hang nor exhaust memory).
// Tests: tests/unit/frontends/text/chat_template_test.cpp.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "frontends/text/chat_template/ast.h"
#include "frontends/text/chat_template/value.h"

namespace mmserve::chat_template {

struct RenderLimits {
  size_t output_bytes_max = 16u << 20;  // also bounds every string a template builds
  int64_t steps_max = 20'000'000;       // units of work: statements, iterations, calls, 32 bytes copied
  int call_depth_max = 100;             // nested macro calls
  uint32_t value_depth_max = 256;       // nesting of lists/dicts a template builds or is given
};

class Interpreter {
 public:
  Interpreter(RenderLimits limits, std::time_t now) : limits_(limits), now_(now) {}

  // Renders `body` with `variables` as the top-level scope, appending to `out`.
  Status render(const Body& body, Dict variables, std::string& out);

  // For builtins: calls a function value; counts one unit of work; checks a size against the output bound.
  StatusOr<Value> call(const Value& fn, CallArgs& args);
  Status step() { return charge(1); }
  // Counts `units` of work (a copy of n bytes is n / 32 units) against steps_max.
  Status charge(int64_t units);
  Status check_size(size_t bytes) const;
  std::time_t now() const { return now_; }
  using Frame = std::unordered_map<std::string, Value>;
  // The scopes a macro was defined in (weak: a frame holds the macro, which must not keep it alive).
  using Closure = std::vector<std::weak_ptr<Frame>>;
  // The body of a macro value that render defined (`{% macro %}` nodes become such values): it sees the
  // scopes it was defined in, as they are when it is called, plus its parameters.
  StatusOr<Value> call_macro(const Node& macro, const Closure& closure, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Status exec(const Body& body, std::string& out);
  Status exec_node(const Node& n, std::string& out);
  Status exec_for(const Node& n, std::string& out);
  Status exec_set(const Node& n);
  Status exec_macro_definition(const Node& n);
  // Runs a body in a scope of its own (block set, filter block, generation), appending to `out`.
  Status exec_scoped(const Body& body, std::string& out);
  StatusOr<Value> apply_filter_chain(const std::vector<ExprPtr>& filters, Value v);

  StatusOr<Value> eval(const Expr& e);
  StatusOr<Value> eval_inner(const Expr& e);
  StatusOr<Value> eval_compare(const Expr& e);
  Status eval_args(const Expr& e, size_t first, CallArgs& out);

  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { frames_.back()->insert_or_assign(name, std::move(v)); }
  Status assign_targets(const std::vector<std::string>& targets, const Value& v);

  RenderLimits limits_;
  std::time_t now_;
  std::vector<std::shared_ptr<Frame>> frames_;  // [0]: the template's top level
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  bool error_located_ = false;
};

}  // namespace mmserve::chat_template
