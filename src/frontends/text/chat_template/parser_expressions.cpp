// Parser, expressions: from the loosest operator to the tightest, as jinja2.parser (conditional, or, and, not,
// comparisons, + -, ~, * / // %, **, unary, then primaries with their postfix `.attr` `[key]` `(args)` and
// `| filter` / `is test`). Test: chat_template_test.cpp and the goldens.
#include "frontends/text/chat_template/builtins.h"
#include "frontends/text/chat_template/parser_internal.h"

namespace mmserve::chat_template {

StatusOr<ExprPtr> Parser::parse_tuple(bool with_condexpr) {
  const Token& start = peek();
  std::vector<ExprPtr> items;
  bool comma = false;
  while (true) {
    if (!items.empty()) {
      if (!skip_op(",")) break;
      comma = true;
      if (peek().type == TokenType::kBlockEnd || peek().type == TokenType::kVariableEnd || is_op(")") ||
          is_name("in") || is_name("if")) {
        break;
      }
    }
    ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
    items.push_back(std::move(e));
  }
  if (!comma) return std::move(items[0]);
  auto t = at<Expr>(start);
  t->kind = ExprKind::kTuple;
  t->args = std::move(items);
  return t;
}

StatusOr<ExprPtr> Parser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxNesting) return error(peek(), "expression nested too deeply");
  if (!with_condexpr) return parse_or();
  const Token& start = peek();
  ASSIGN_OR_RETURN(ExprPtr then, parse_or());
  while (skip_name("if")) {
    ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
    ExprPtr otherwise;
    if (skip_name("else")) {
      ASSIGN_OR_RETURN(otherwise, parse_expression(true));
    }
    auto c = at<Expr>(start);
    c->kind = ExprKind::kCond;
    c->args.push_back(std::move(then));
    c->args.push_back(std::move(cond));
    c->args.push_back(std::move(otherwise));
    then = std::move(c);
  }
  return then;
}

StatusOr<ExprPtr> Parser::binary(ExprKind kind, const Token& tok, ExprPtr a, ExprPtr b, std::string op) {
  auto e = at<Expr>(tok);
  e->kind = kind;
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return e;
}

StatusOr<ExprPtr> Parser::parse_or() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (is_name("or")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    ASSIGN_OR_RETURN(left, binary(ExprKind::kOr, tok, std::move(left), std::move(right)));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_and() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (is_name("and")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    ASSIGN_OR_RETURN(left, binary(ExprKind::kAnd, tok, std::move(left), std::move(right)));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_not() {
  DepthGuard guard(depth_);
  if (depth_ > kMaxNesting) return error(peek(), "expression nested too deeply");
  if (is_name("not")) {
    const Token& tok = next();
    auto e = at<Expr>(tok);
    e->kind = ExprKind::kNot;
    ASSIGN_OR_RETURN(ExprPtr inner, parse_not());
    e->args.push_back(std::move(inner));
    return e;
  }
  return parse_compare();
}

StatusOr<ExprPtr> Parser::parse_compare() {
  const Token& start = peek();
  ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    std::string op;
    if (peek().type == TokenType::kOperator && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                                peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      ++pos_;
      op = "in";
    } else if (is_name("not") && is_name("in", 1)) {
      pos_ += 2;
      op = "notin";
    } else {
      break;
    }
    ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
    ops.push_back(op);
    operands.push_back(std::move(operand));
  }
  if (ops.empty()) return first;
  auto e = at<Expr>(start);
  e->kind = ExprKind::kCompare;
  e->ops = std::move(ops);
  e->args.push_back(std::move(first));
  for (auto& o : operands) e->args.push_back(std::move(o));
  return e;
}

StatusOr<ExprPtr> Parser::parse_math1() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (is_op("+") || is_op("-")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), tok.text));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_concat() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
  while (is_op("~")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
    ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), "~"));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_math2() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), tok.text));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_pow() {
  ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (is_op("**")) {
    const Token& tok = next();
    ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), "**"));
  }
  return left;
}

StatusOr<ExprPtr> Parser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxNesting) return error(peek(), "expression nested too deeply");
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& tok = next();
    node = at<Expr>(tok);
    node->kind = tok.text == "-" ? ExprKind::kNeg : ExprKind::kPos;
    ASSIGN_OR_RETURN(ExprPtr inner, parse_unary(false));
    node->args.push_back(std::move(inner));
  } else {
    ASSIGN_OR_RETURN(node, parse_primary());
    ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  }
  if (with_filter) return parse_filters_and_tests(std::move(node));
  return node;
}

StatusOr<ExprPtr> Parser::parse_primary() {
  DepthGuard guard(depth_);
  if (depth_ > kMaxNesting) return error(peek(), "expression nested too deeply");
  const Token& tok = peek();
  auto e = at<Expr>(tok);
  switch (tok.type) {
    case TokenType::kName:
      ++pos_;
      if (tok.text == "true" || tok.text == "True") {
        e->value = Value::boolean(true);
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = Value::boolean(false);
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = tok.text;
      }
      return e;
    case TokenType::kString: {
      std::string s;
      while (peek().type == TokenType::kString) s += next().text;  // adjacent literals concatenate
      e->value = Value::string(std::move(s));
      return e;
    }
    case TokenType::kInteger:
      ++pos_;
      e->value = Value::integer(tok.int_value);
      return e;
    case TokenType::kFloat:
      ++pos_;
      e->value = Value::floating(tok.float_value);
      return e;
    case TokenType::kOperator:
      if (tok.text == "(") {
        ++pos_;
        if (skip_op(")")) {
          e->kind = ExprKind::kTuple;
          return e;
        }
        ASSIGN_OR_RETURN(ExprPtr inner, parse_tuple(true));
        RETURN_IF_ERROR(expect_op(")"));
        return inner;
      }
      if (tok.text == "[" || tok.text == "{") {
        ++pos_;
        const bool is_dict = tok.text == "{";
        e->kind = is_dict ? ExprKind::kDict : ExprKind::kList;
        const char* close = is_dict ? "}" : "]";
        while (!is_op(close)) {
          if (!e->args.empty()) {
            RETURN_IF_ERROR(expect_op(","));
            if (is_op(close)) break;
          }
          ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
          e->args.push_back(std::move(item));
          if (is_dict) {
            RETURN_IF_ERROR(expect_op(":"));
            ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
            e->args.push_back(std::move(value));
          }
        }
        ++pos_;
        return e;
      }
      break;
    default: break;
  }
  return error(tok, "unexpected " + describe(tok));
}

StatusOr<ExprPtr> Parser::parse_postfix(ExprPtr node) {
  while (true) {
    const Token& tok = peek();
    if (is_op(".")) {
      ++pos_;
      auto e = at<Expr>(tok);
      if (peek().type == TokenType::kName) {
        e->kind = ExprKind::kGetAttr;
        e->name = next().text;
      } else if (peek().type == TokenType::kInteger) {
        e->kind = ExprKind::kGetItem;
        auto idx = at<Expr>(peek());
        idx->value = Value::integer(next().int_value);
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(idx));
        node = std::move(e);
        continue;
      } else {
        return error(peek(), "expected an attribute name after '.', got " + describe(peek()));
      }
      e->args.push_back(std::move(node));
      node = std::move(e);
    } else if (is_op("[")) {
      ++pos_;
      ASSIGN_OR_RETURN(node, parse_subscript(tok, std::move(node)));
    } else if (is_op("(")) {
      ++pos_;
      auto e = at<Expr>(tok);
      e->kind = ExprKind::kCall;
      e->args.push_back(std::move(node));
      RETURN_IF_ERROR(parse_call_args(*e));
      node = std::move(e);
    } else {
      return node;
    }
  }
}

StatusOr<ExprPtr> Parser::parse_subscript(const Token& tok, ExprPtr target) {
  std::vector<ExprPtr> parts(3);
  bool slice = false;
  for (int part = 0; part < 3; ++part) {
    if (!is_op(":") && !is_op("]")) {
      ASSIGN_OR_RETURN(parts[static_cast<size_t>(part)], parse_expression(true));
    }
    if (part < 2 && skip_op(":")) {
      slice = true;
      continue;
    }
    break;
  }
  // jinja2 reads `x[]` and `x[a, b]` as subscripts by a tuple.
  if (!slice && (!parts[0] || is_op(","))) {
    auto tuple = at<Expr>(tok);
    tuple->kind = ExprKind::kTuple;
    if (parts[0]) tuple->args.push_back(std::move(parts[0]));
    while (skip_op(",") && !is_op("]")) {
      ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
      tuple->args.push_back(std::move(item));
    }
    parts[0] = std::move(tuple);
  }
  RETURN_IF_ERROR(expect_op("]"));
  auto e = at<Expr>(tok);
  e->args.push_back(std::move(target));
  if (slice) {
    e->kind = ExprKind::kSlice;
    for (auto& p : parts) e->args.push_back(std::move(p));
  } else {
    e->kind = ExprKind::kGetItem;
    e->args.push_back(std::move(parts[0]));
  }
  return e;
}

Status Parser::parse_call_args(Expr& call) {
  while (!is_op(")")) {
    if (call.args.size() > 1 || !call.kwargs.empty()) {
      RETURN_IF_ERROR(expect_op(","));
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) return error(peek(), "*args and **kwargs in calls are not supported");
    if (peek().type == TokenType::kName && is_op("=", 1)) {
      std::string key = next().text;
      ++pos_;
      ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      call.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!call.kwargs.empty()) return error(peek(), "a positional argument follows a keyword argument");
      ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      call.args.push_back(std::move(value));
    }
  }
  ++pos_;
  return ok_status();
}

StatusOr<ExprPtr> Parser::parse_filter(ExprPtr input) {
  const Token& tok = peek();
  ASSIGN_OR_RETURN(std::string name, expect_name());
  if (!is_known_filter(name)) return error(tok, "no filter named '" + name + "'");
  auto e = at<Expr>(tok);
  e->kind = ExprKind::kFilter;
  e->name = std::move(name);
  e->args.push_back(std::move(input));
  if (skip_op("(")) RETURN_IF_ERROR(parse_call_args(*e));
  return e;
}

StatusOr<ExprPtr> Parser::parse_filters_and_tests(ExprPtr node) {
  while (true) {
    if (skip_op("|")) {
      ASSIGN_OR_RETURN(node, parse_filter(std::move(node)));
    } else if (is_name("is")) {
      const Token& tok = next();
      auto e = at<Expr>(tok);
      e->kind = ExprKind::kTest;
      e->negated = skip_name("not");
      const Token& name_tok = peek();
      ASSIGN_OR_RETURN(e->name, expect_name());
      if (!is_known_test(e->name)) return error(name_tok, "no test named '" + e->name + "'");
      e->args.push_back(std::move(node));
      if (skip_op("(")) {
        RETURN_IF_ERROR(parse_call_args(*e));
      } else {
        const Token& a = peek();
        const bool arg_follows =
            (a.type == TokenType::kName && a.text != "else" && a.text != "or" && a.text != "and") ||
            a.type == TokenType::kString || a.type == TokenType::kInteger || a.type == TokenType::kFloat ||
            (a.type == TokenType::kOperator && (a.text == "(" || a.text == "[" || a.text == "{"));
        if (arg_follows) {  // `x is divisibleby 3`: one argument without parentheses
          ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
          ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
          e->args.push_back(std::move(arg));
        }
      }
      node = std::move(e);
    } else {
      return node;
    }
  }
}

}  // namespace mmserve::chat_template
