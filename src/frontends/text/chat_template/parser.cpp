// Parser: recursive descent over the token stream, one function per grammar level (statements first, then
// expressions from the loosest operator to the tightest). Test: chat_template_test.cpp (ParserTest.*).
#include "frontends/text/chat_template/parser.h"

#include <set>

#include "frontends/text/chat_template/builtins.h"

namespace mmserve::chat_template {
namespace {

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

  // --- statements ---

  // Parses nodes until a block tag named in `stops` (its name goes to `stop`, the tag's name is consumed, the
  // rest of the tag is not) or the end of the template (only allowed when `stops` is empty).
  Status parse_body(Body& body, const std::set<std::string>& stops, std::string& stop, const Token* opener) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxNesting) return error(peek(), "blocks nested too deeply");
    while (true) {
      const Token& tok = peek();
      if (tok.type == TokenType::kEnd) {
        if (stops.empty()) return ok_status();
        std::string want;
        for (const auto& s : stops) want += (want.empty() ? "" : " or ") + ("{% " + s + " %}");
        return error(tok, "unexpected end of template: expected " + want + " to close the '" + opener->text +
                              "' at line " + std::to_string(opener->line) + ", column " +
                              std::to_string(opener->column));
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

  Status parse_statement(const Token& tag, NodePtr& out) {
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

  Status parse_if(const Token& tag, NodePtr& out) {
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

  Status parse_targets(std::vector<std::string>& targets) {
    const bool paren = skip_op("(");
    do {
      ASSIGN_OR_RETURN(std::string name, expect_name());
      targets.push_back(std::move(name));
    } while (skip_op(","));
    if (paren) RETURN_IF_ERROR(expect_op(")"));
    return ok_status();
  }

  Status parse_for(const Token& tag, NodePtr& out) {
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

  Status parse_set(const Token& tag, NodePtr& out) {
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

  Status parse_macro(const Token& tag, NodePtr& out) {
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

  // `{% filter f | g %}` (bare: the first filter has no leading '|') or `{% set x | f | g %}`: kFilter nodes
  // with a null input.
  Status parse_filter_chain(std::vector<ExprPtr>& filters, bool bare) {
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

  // --- expressions ---

  // a, b, c  -> a tuple; a single expression otherwise. A trailing comma makes a tuple.
  StatusOr<ExprPtr> parse_tuple(bool with_condexpr) {
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

  StatusOr<ExprPtr> parse_expression(bool with_condexpr) {
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

  StatusOr<ExprPtr> binary(ExprKind kind, const Token& tok, ExprPtr a, ExprPtr b, std::string op = "") {
    auto e = at<Expr>(tok);
    e->kind = kind;
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  StatusOr<ExprPtr> parse_or() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (is_name("or")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      ASSIGN_OR_RETURN(left, binary(ExprKind::kOr, tok, std::move(left), std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_and() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (is_name("and")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      ASSIGN_OR_RETURN(left, binary(ExprKind::kAnd, tok, std::move(left), std::move(right)));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_not() {
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

  StatusOr<ExprPtr> parse_compare() {
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

  StatusOr<ExprPtr> parse_math1() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
    while (is_op("+") || is_op("-")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
      ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), tok.text));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_concat() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
    while (is_op("~")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
      ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), "~"));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_math2() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
      ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), tok.text));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_pow() {
    ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (is_op("**")) {
      const Token& tok = next();
      ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      ASSIGN_OR_RETURN(left, binary(ExprKind::kBinary, tok, std::move(left), std::move(right), "**"));
    }
    return left;
  }

  StatusOr<ExprPtr> parse_unary(bool with_filter) {
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

  StatusOr<ExprPtr> parse_primary() {
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

  StatusOr<ExprPtr> parse_postfix(ExprPtr node) {
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

  StatusOr<ExprPtr> parse_subscript(const Token& tok, ExprPtr target) {
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

  // After '(': positional arguments, then name=value keywords, then ')'.
  Status parse_call_args(Expr& call) {
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

  // After '|': name [ (args) ]. `input` is the filtered expression (null for filter blocks).
  StatusOr<ExprPtr> parse_filter(ExprPtr input) {
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

  StatusOr<ExprPtr> parse_filters_and_tests(ExprPtr node) {
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

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StatusOr<Body> parse(const std::vector<Token>& tokens) {
  return Parser(tokens).run();
}

}  // namespace mmserve::chat_template
