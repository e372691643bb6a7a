// The chat-template syntax tree: expressions (Expr) and statements (Node), built by parser.cpp and walked by
// interpreter.cpp. One struct per level with a kind tag and generic children keeps the tree easy to print and
// to follow; each kind's comment says which fields it uses. Positions are the template's line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "frontends/text/chat_template/value.h"

namespace mmserve::chat_template {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kList,     // args: the items
  kTuple,    // args: the items
  kDict,     // args: key, value, key, value, ...
  kGetAttr,  // args[0].name
  kGetItem,  // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (absent parts are null)
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs)
  kTest,     // args[0] is [not] name(args[1..], kwargs); negated
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kNot,      // not args[0]
  kBinary,   // args[0] op args[1]: + - * / // % ** ~
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kCond,     // args[0] if args[1] else args[2] (args[2] null: an Undefined)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  Value value;
  std::string name;              // variable, attribute, filter or test name; the operator of kBinary
  std::vector<std::string> ops;  // kCompare's operators
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
  int line = 0;
  int column = 0;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // conditions[i] -> bodies[i]; else_body
  kFor,          // for targets in expr [if condition]: body; else_body
  kSet,          // set targets = expr, or set targets[0].attribute = expr (attribute non-empty)
  kSetBlock,     // set targets[0] [| filters] %} body {% endset
  kMacro,        // macro name(params) body
  kBreak,        // {% break %}
  kContinue,     // {% continue %}
  kGeneration,   // {% generation %} body {% endgeneration %}: rendered as is
  kFilterBlock,  // {% filter f %} body {% endfilter %}: filters applied to the body's text
};

struct Node {
  NodeKind kind = NodeKind::kData;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  // kMacro: parameter names with default expressions (null: required); kSetBlock/kFilterBlock: filters, each
  // a kFilter Expr whose args[0] is null (the body's text goes there).
  std::vector<std::pair<std::string, ExprPtr>> params;
  std::vector<ExprPtr> filters;
  int line = 0;
  int column = 0;
};

}  // namespace mmserve::chat_template
