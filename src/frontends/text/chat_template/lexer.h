// The chat-template lexer: template source -> a flat token stream, with Jinja2's whitespace rules applied.
//
// Text between tags becomes kData tokens; `{{ ... }}` and `{% ... %}` become begin/end tokens around the
// expression tokens inside; comments and raw blocks are resolved here. Whitespace follows Jinja2 as HF configures
// it: `-` on a tag strips the whitespace beside it, trim_blocks drops the first newline after a block or comment
// tag, lstrip_blocks drops the spaces and tabs before a block or comment tag that starts its line (`+` opts out),
// line endings become "\n" and one trailing newline of the template is dropped (keep_trailing_newline=False).
// Tests: tests/unit/frontends/text/chat_template_test.cpp (ChatTemplateLexerTest.*, and the whitespace goldens).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mmserve::chat_template {

enum class TokenType {
  kData,           // literal template text
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // text holds the decoded value
  kInteger,  // int_value
  kFloat,    // float_value
  kOperator,
  kEnd,  // end of the template
};

struct Token {
  TokenType type = TokenType::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Tokenizes a template; errors (an unclosed tag, comment or string, a stray character) carry "line L, column C".
StatusOr<std::vector<Token>> tokenize(std::string_view source);

}  // namespace mmserve::chat_template
