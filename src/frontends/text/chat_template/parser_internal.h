// The parser's class, shared by its two halves: parser.cpp (statements, and the entry point) and
// parser_expressions.cpp (expressions, loosest operator first). Internal to the chat-template library.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "frontends/text/chat_template/ast.h"
#include "frontends/text/chat_template/lexer.h"

namespace mmserve::chat_template {

constexpr int kMaxNesting = 200;  // expression and block nesting; real templates stay below 20

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  StatusOr<Body> run() {
    Body body;
    std::string stop;
    RETURN_IF_ERROR(parse_body(body, {}, stop, nullptr));
    return body;
  }

 private:
  // --- token helpers ---
  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kOperator && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEnd: return "end of template";
      case TokenType::kBlockEnd: return "'%}'";
      case TokenType::kVariableEnd: return "'}}'";
      case TokenType::kBlockBegin: return "'{%'";
      case TokenType::kVariableBegin: return "'{{'";
      case TokenType::kData: return "template text";
      case TokenType::kString: return "a string";
      case TokenType::kInteger:
      case TokenType::kFloat: return "a number";
      default: return "'" + t.text + "'";
    }
  }
  Status error(const Token& at, const std::string& message) const {
    return invalid_argument("TemplateSyntaxError: " + message + " (line " + std::to_string(at.line) + ", column " +
                            std::to_string(at.column) + ")");
  }
  Status expect_op(const char* op) {
    if (skip_op(op)) return ok_status();
    return error(peek(), std::string("expected '") + op + "', got " + describe(peek()));
  }
  Status expect_block_end() {
    if (peek().type == TokenType::kBlockEnd) {
      ++pos_;
      return ok_status();
    }
    return error(peek(), "expected '%}', got " + describe(peek()));
  }
  StatusOr<std::string> expect_name() {
    if (peek().type != TokenType::kName) return error(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  template <typename T>
  static std::unique_ptr<T> at(const Token& tok) {
    auto n = std::make_unique<T>();
    n->line = tok.line;
    n->column = tok.column;
    return n;
  }
  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(++depth) {}
    ~DepthGuard() { --d; }
  };

  // --- statements (parser.cpp) ---
  // Parses nodes until a block tag named in `stops` (its name goes to `stop`, the tag's name is consumed, the
  // rest of the tag is not) or the end of the template (only allowed when `stops` is empty).
  Status parse_body(Body& body, const std::set<std::string>& stops, std::string& stop, const Token* opener);
  Status parse_statement(const Token& tag, NodePtr& out);
  Status parse_if(const Token& tag, NodePtr& out);
  Status parse_targets(std::vector<std::string>& targets);
  Status parse_for(const Token& tag, NodePtr& out);
  Status parse_set(const Token& tag, NodePtr& out);
  Status parse_macro(const Token& tag, NodePtr& out);
  // `{% filter f | g %}` (bare: the first filter has no leading '|') or `{% set x | f | g %}`: kFilter nodes
  // with a null input.
  Status parse_filter_chain(std::vector<ExprPtr>& filters, bool bare);

  // --- expressions (parser_expressions.cpp) ---
  // a, b, c  -> a tuple; a single expression otherwise. A trailing comma makes a tuple.
  StatusOr<ExprPtr> parse_tuple(bool with_condexpr);
  StatusOr<ExprPtr> parse_expression(bool with_condexpr);
  StatusOr<ExprPtr> binary(ExprKind kind, const Token& tok, ExprPtr a, ExprPtr b, std::string op = "");
  StatusOr<ExprPtr> parse_or();
  StatusOr<ExprPtr> parse_and();
  StatusOr<ExprPtr> parse_not();
  StatusOr<ExprPtr> parse_compare();
  StatusOr<ExprPtr> parse_math1();
  StatusOr<ExprPtr> parse_concat();
  StatusOr<ExprPtr> parse_math2();
  StatusOr<ExprPtr> parse_pow();
  StatusOr<ExprPtr> parse_unary(bool with_filter);
  StatusOr<ExprPtr> parse_primary();
  StatusOr<ExprPtr> parse_postfix(ExprPtr node);
  StatusOr<ExprPtr> parse_subscript(const Token& tok, ExprPtr target);
  // After '(': positional arguments, then name=value keywords, then ')'.
  Status parse_call_args(Expr& call);
  // After '|': name [ (args) ]. `input` is the filtered expression (null for filter blocks).
  StatusOr<ExprPtr> parse_filter(ExprPtr input);
  StatusOr<ExprPtr> parse_filters_and_tests(ExprPtr node);

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace mmserve::chat_template
