// The chat-template parser: tokens -> a statement tree (ast.h), following jinja2.parser's grammar and operator
// precedence (`~` binds tighter than + and -, filters and `is` tests tighter than any binary operator,
// `not x is y` is `not (x is y)`). Unknown tags, filters and tests are errors here, before anything renders,
// as in Jinja2 (which checks filter and test names at compile time). Nesting is bounded, so a hostile
// template cannot exhaust the stack. Tests: tests/unit/frontends/text/chat_template_test.cpp
// (ChatTemplateSyntaxErrorTest.*).
#pragma once

#include <vector>

#include "core/status.h"
#include "frontends/text/chat_template/ast.h"
#include "frontends/text/chat_template/lexer.h"

namespace mmserve::chat_template {

// Errors read "TemplateSyntaxError: <what> (line L, column C)".
StatusOr<Body> parse(const std::vector<Token>& tokens);

}  // namespace mmserve::chat_template
