// Parser, statements: the template's blocks and tags, down to where an expression starts (parser_expressions.cpp).
// Recursive descent over the token stream, one function per construct. Test: chat_template_test.cpp
// (ChatTemplateSyntaxErrorTest.*).
#include "frontends/text/chat_template/parser.h"

#include "frontends/text/chat_template/parser_internal.h"

namespace mmserve::chat_template {

Status Parser::parse_body(Body& body, const std::set<std::string>& stops, std::string& stop, const Token* opener) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxNesting) return error(peek(), "blocks nested too deeply");
  while (true) {
    const Token& tok = peek();
    if (tok.type == TokenType::kEnd) {
      if (stops.empty()) return ok_status();
      std::string want;
      for (const auto& s : stops) want += (want.empty() ? "" : " or ") + ("{% " + s + " %}");
      return error(tok, "unexpected end of template: expected " + want + " to close the '" + opener->text +
                            "' at line " + std::to_string(opener->line) + ", column " + std::to_string(opener->column));
    }
    if (tok.type == TokenType::kData) {
      auto n = at<Node>(tok);
      n->kind = NodeKind::kData;
      n->text = tok.text;
      body.push_back(std::move(n));
      ++pos_;
    } else if (tok.type == TokenType::kVariableBegin) {
      ++pos_;
      auto n = at<Node>(tok);
      n->kind = NodeKind::kOutput;
      ASSIGN_OR_RETURN(n->expr, parse_tuple(true));
      if (peek().type != TokenType::kVariableEnd) return error(peek(), "expected '}}', got " + describe(peek()));
      ++pos_;
      body.push_back(std::move(n));
    } else if (tok.type == TokenType::kBlockBegin) {
      const Token& name = peek(1);
      if (name.type != TokenType::kName) return error(name, "expected a tag name, got " + describe(name));
      if (stops.count(name.text)) {
        pos_ += 2;
        stop = name.text;
        return ok_status();
      }
      pos_ += 2;
      NodePtr n;
      RETURN_IF_ERROR(parse_statement(name, n));
      if (n) body.push_back(std::move(n));
    } else {
      return error(tok, "unexpected " + describe(tok));
    }
  }
}

Status Parser::parse_statement(const Token& tag, NodePtr& out) {
  const std::string& name = tag.text;
  if (name == "if") return parse_if(tag, out);
  if (name == "for") return parse_for(tag, out);
  if (name == "set") return parse_set(tag, out);
  if (name == "macro") return parse_macro(tag, out);
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return error(tag, "'" + name + "' outside of a loop");
    out = at<Node>(tag);
    out->kind = name == "break" ? NodeKind::kBreak : NodeKind::kContinue;
    return expect_block_end();
  }
  if (name == "generation") {
    RETURN_IF_ERROR(expect_block_end());
    out = at<Node>(tag);
    out->kind = NodeKind::kGeneration;
    const int saved = loop_depth_;
    loop_depth_ = 0;  // the body is a caller() macro in jinja2: break/continue cannot leave it
    std::string stop;
    Status st = parse_body(out->body, {"endgeneration"}, stop, &tag);
    loop_depth_ = saved;
    RETURN_IF_ERROR(st);
    return expect_block_end();
  }
  if (name == "filter") {
    out = at<Node>(tag);
    out->kind = NodeKind::kFilterBlock;
    RETURN_IF_ERROR(parse_filter_chain(out->filters, true));
    RETURN_IF_ERROR(expect_block_end());
    std::string stop;
    RETURN_IF_ERROR(parse_body(out->body, {"endfilter"}, stop, &tag));
    return expect_block_end();
  }
  if (name == "include" || name == "import" || name == "from" || name == "extends" || name == "block" ||
      name == "call" || name == "with" || name == "do" || name == "autoescape" || name == "trans") {
    return error(tag, "the '" + name + "' tag is not supported in chat templates");
  }
  return error(tag, "encountered unknown tag '" + name + "'");
}

Status Parser::parse_if(const Token& tag, NodePtr& out) {
  out = at<Node>(tag);
  out->kind = NodeKind::kIf;
  while (true) {
    ASSIGN_OR_RETURN(ExprPtr cond, parse_tuple(true));
    RETURN_IF_ERROR(expect_block_end());
    Body body;
    std::string stop;
    RETURN_IF_ERROR(parse_body(body, {"elif", "else", "endif"}, stop, &tag));
    out->conditions.push_back(std::move(cond));
    out->bodies.push_back(std::move(body));
    if (stop == "elif") continue;
    if (stop == "else") {
      RETURN_IF_ERROR(expect_block_end());
      RETURN_IF_ERROR(parse_body(out->else_body, {"endif"}, stop, &tag));
    }
    return expect_block_end();
  }
}

Status Parser::parse_targets(std::vector<std::string>& targets) {
  const bool paren = skip_op("(");
  do {
    ASSIGN_OR_RETURN(std::string name, expect_name());
    targets.push_back(std::move(name));
  } while (skip_op(","));
  if (paren) RETURN_IF_ERROR(expect_op(")"));
  return ok_status();
}

Status Parser::parse_for(const Token& tag, NodePtr& out) {
  out = at<Node>(tag);
  out->kind = NodeKind::kFor;
  RETURN_IF_ERROR(parse_targets(out->targets));
  if (!skip_name("in")) return error(peek(), "expected 'in' in the for loop, got " + describe(peek()));
  ASSIGN_OR_RETURN(out->expr, parse_tuple(false));  // no `x if y else z` here: `if` starts the loop filter
  if (skip_name("if")) {
    ASSIGN_OR_RETURN(out->condition, parse_expression(true));
  }
  if (is_name("recursive")) return error(peek(), "recursive for loops are not supported");
  RETURN_IF_ERROR(expect_block_end());
  ++loop_depth_;
  std::string stop;
  Status st = parse_body(out->body, {"else", "endfor"}, stop, &tag);
  --loop_depth_;
  RETURN_IF_ERROR(st);
  if (stop == "else") {
    RETURN_IF_ERROR(expect_block_end());
    const int saved = loop_depth_;
    loop_depth_ = 0;  // break/continue in a for's else belong to an outer loop (jinja2 rejects them there too)
    st = parse_body(out->else_body, {"endfor"}, stop, &tag);
    loop_depth_ = saved;
    RETURN_IF_ERROR(st);
  }
  return expect_block_end();
}

Status Parser::parse_set(const Token& tag, NodePtr& out) {
  out = at<Node>(tag);
  out->kind = NodeKind::kSet;
  if (peek().type == TokenType::kName && is_op(".", 1)) {  // set ns.attribute = ...
    out->targets.push_back(next().text);
    ++pos_;
    ASSIGN_OR_RETURN(out->attribute, expect_name());
    RETURN_IF_ERROR(expect_op("="));
  } else {
    RETURN_IF_ERROR(parse_targets(out->targets));
    if (!skip_op("=")) {  // a block set: {% set x %}...{% endset %}, optionally through filters
      if (out->targets.size() != 1) return error(tag, "a block set assigns exactly one name");
      out->kind = NodeKind::kSetBlock;
      RETURN_IF_ERROR(parse_filter_chain(out->filters, false));
      RETURN_IF_ERROR(expect_block_end());
      std::string stop;
      RETURN_IF_ERROR(parse_body(out->body, {"endset"}, stop, &tag));
      return expect_block_end();
    }
  }
  ASSIGN_OR_RETURN(out->expr, parse_tuple(true));
  return expect_block_end();
}

Status Parser::parse_macro(const Token& tag, NodePtr& out) {
  out = at<Node>(tag);
  out->kind = NodeKind::kMacro;
  ASSIGN_OR_RETURN(out->text, expect_name());
  RETURN_IF_ERROR(expect_op("("));
  while (!is_op(")")) {
    if (!out->params.empty()) RETURN_IF_ERROR(expect_op(","));
    if (is_op(")")) break;
    ASSIGN_OR_RETURN(std::string param, expect_name());
    ExprPtr def;
    if (skip_op("=")) {
      ASSIGN_OR_RETURN(def, parse_expression(true));
    } else if (!out->params.empty() && out->params.back().second) {
      return error(peek(), "a macro parameter without a default follows one with a default");
    }
    out->params.emplace_back(std::move(param), std::move(def));
  }
  ++pos_;
  RETURN_IF_ERROR(expect_block_end());
  const int saved = loop_depth_;
  loop_depth_ = 0;
  std::string stop;
  Status st = parse_body(out->body, {"endmacro"}, stop, &tag);
  loop_depth_ = saved;
  RETURN_IF_ERROR(st);
  if (peek().type == TokenType::kName) ++pos_;  // {% endmacro name %}
  return expect_block_end();
}

Status Parser::parse_filter_chain(std::vector<ExprPtr>& filters, bool bare) {
  if (bare) {
    ASSIGN_OR_RETURN(ExprPtr f, parse_filter(nullptr));
    filters.push_back(std::move(f));
  }
  while (skip_op("|")) {
    ASSIGN_OR_RETURN(ExprPtr f, parse_filter(nullptr));
    filters.push_back(std::move(f));
  }
  return ok_status();
}

StatusOr<Body> parse(const std::vector<Token>& tokens) {
  return Parser(tokens).run();
}

}  // namespace mmserve::chat_template
