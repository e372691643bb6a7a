// Lexer: a transcription of what jinja2.lexer does for HF's environment (trim_blocks, lstrip_blocks, default
// delimiters), written as a loop over the source instead of regexes. Test: chat_template_test.cpp
// (ChatTemplateLexerTest.*).
#include "frontends/text/chat_template/lexer.h"

#include <cstring>

#include "frontends/text/chat_template/value.h"

namespace mmserve::chat_template {
namespace {

// Python's str.splitlines() separators all become "\n" (jinja2 joins source.splitlines() with "\n"), and one
// trailing newline is dropped.
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
      out += '\n';
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {  // U+0085
      out += '\n';
      ++i;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out += '\n';  // U+2028, U+2029
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// The length of the Python-whitespace code point at s[i], or 0.
size_t space_at(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return is_py_space(c) ? 1 : 0;
  size_t len = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + len > s.size()) return 0;
  const std::u32string cp = utf8_to_u32(s.substr(i, len));
  return cp.size() == 1 && is_py_space(cp[0]) ? len : 0;
}

// str.rstrip() (Python whitespace).
std::string_view rstrip_py(std::string_view s) {
  const std::u32string u = utf8_to_u32(s);
  size_t n = u.size();
  while (n > 0 && is_py_space(u[n - 1])) --n;
  size_t bytes = 0;
  for (size_t k = 0; k < n; ++k) {
    const char32_t cp = u[k];
    bytes += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return s.substr(0, bytes);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  StatusOr<std::vector<Token>> run() {
    bool line_starting = true;  // the next text starts a line (for lstrip_blocks)
    while (pos_ < src_.size()) {
      const size_t open = find_opener(pos_);
      std::string_view text(src_.data() + pos_, (open == std::string::npos ? src_.size() : open) - pos_);
      if (open == std::string::npos) {
        emit_data(text, pos_);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      text = control_text(text, sign, kind != '{', line_starting);
      emit_data(text, pos_);
      pos_ = open + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        RETURN_IF_ERROR(lex_comment(open));
      } else if (kind == '%' && starts_raw()) {
        RETURN_IF_ERROR(lex_raw(open));
      } else {
        RETURN_IF_ERROR(lex_tag(kind == '{', open));
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    Token end;
    end.type = TokenType::kEnd;
    set_position(end, src_.size());
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  size_t find_opener(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // The text before a tag after whitespace control: `-` strips all trailing whitespace; otherwise lstrip_blocks
  // removes the spaces/tabs between the last newline and a block or comment tag.
  static std::string_view control_text(std::string_view text, char sign, bool lstrip_applies, bool line_starting) {
    if (sign == '-') return rstrip_py(text);
    if (sign == '+' || !lstrip_applies) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (text[i] != ' ' && text[i] != '\t') return text;
    }
    return text.substr(0, l_pos);
  }

  void emit_data(std::string_view text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.type = TokenType::kData;
    t.text = std::string(text);
    set_position(t, at);
    tokens_.push_back(std::move(t));
  }

  // After a closing `%}` or `#}`: `-` eats all whitespace, `+` nothing, else trim_blocks eats one newline.
  void after_block_end(char sign) {
    if (sign == '-') {
      while (pos_ < src_.size()) {
        const size_t n = space_at(src_, pos_);
        if (n == 0) break;
        pos_ += n;
      }
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
  }

  Status lex_comment(size_t open) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) return error_at(open, "missing end of comment tag");
    const char sign = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    pos_ = close + 2;
    after_block_end(sign);
    return ok_status();
  }

  // `{% raw %}` (any spacing, optional -/+ signs) at pos_, which is just after `{%` and its sign.
  bool starts_raw() const {
    size_t i = pos_;
    while (i < src_.size() && (src_[i] == ' ' || src_[i] == '\t' || src_[i] == '\n')) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    while (i < src_.size() && (src_[i] == ' ' || src_[i] == '\t' || src_[i] == '\n')) ++i;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  Status lex_raw(size_t open) {
    size_t close = src_.find("%}", pos_);
    const bool strip_after = close > 0 && src_[close - 1] == '-';
    pos_ = close + 2;
    if (strip_after) after_block_end('-');
    // The body runs to the first {% endraw %}.
    size_t search = pos_;
    while (true) {
      const size_t end_open = src_.find("{%", search);
      if (end_open == std::string::npos) return error_at(open, "missing {% endraw %} for this {% raw %}");
      size_t i = end_open + 2;
      const char sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : 0;
      if (sign) ++i;
      while (i < src_.size() && (src_[i] == ' ' || src_[i] == '\t' || src_[i] == '\n')) ++i;
      if (src_.compare(i, 6, "endraw") != 0) {
        search = end_open + 2;
        continue;
      }
      i += 6;
      while (i < src_.size() && (src_[i] == ' ' || src_[i] == '\t' || src_[i] == '\n')) ++i;
      const char end_sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i] : 0;
      if (end_sign) ++i;
      if (src_.compare(i, 2, "%}") != 0) {
        search = end_open + 2;
        continue;
      }
      const std::string_view body(src_.data() + pos_, end_open - pos_);
      emit_data(control_text(body, sign, true, false), pos_);
      pos_ = i + 2;
      after_block_end(end_sign);
      return ok_status();
    }
  }

  // The inside of {{ ... }} or {% ... %}, up to and including its closing delimiter.
  Status lex_tag(bool variable, size_t open) {
    Token begin;
    begin.type = variable ? TokenType::kVariableBegin : TokenType::kBlockBegin;
    set_position(begin, open);
    tokens_.push_back(begin);
    int depth = 0;  // open brackets: a closing delimiter inside them is an operator, as in jinja2
    while (true) {
      while (pos_ < src_.size()) {
        const size_t n = space_at(src_, pos_);
        if (n == 0) break;
        pos_ += n;
      }
      if (pos_ >= src_.size()) {
        return error_at(
            open, std::string("unexpected end of template: this ") + (variable ? "{{" : "{%") + " is never closed");
      }
      if (depth == 0) {
        const char* close = variable ? "}}" : "%}";
        const char sign = src_[pos_];
        const bool signed_close = (sign == '-' || (!variable && sign == '+')) && src_.compare(pos_ + 1, 2, close) == 0;
        if (signed_close || src_.compare(pos_, 2, close) == 0) {
          Token end;
          end.type = variable ? TokenType::kVariableEnd : TokenType::kBlockEnd;
          set_position(end, pos_);
          tokens_.push_back(end);
          pos_ += signed_close ? 3 : 2;
          if (variable) {
            if (signed_close) after_block_end('-');
          } else {
            after_block_end(signed_close ? sign : 0);
          }
          return ok_status();
        }
      }
      RETURN_IF_ERROR(lex_expression_token(depth));
    }
  }

  Status lex_expression_token(int& depth) {
    const size_t start = pos_;
    const char c = src_[pos_];
    Token t;
    set_position(t, start);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      t.type = TokenType::kName;
      t.text = src_.substr(start, pos_ - start);
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      RETURN_IF_ERROR(lex_number(t));
    } else if (c == '\'' || c == '"') {
      RETURN_IF_ERROR(lex_string(t));
    } else {
      static constexpr const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                             ">",  "=",  "(",  ")",  "[",  "]",  "{", "}", ",", ".", ":", "|"};
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (src_.compare(pos_, n, op) == 0) {
          t.type = TokenType::kOperator;
          t.text = op;
          pos_ += n;
          break;
        }
      }
      if (t.type != TokenType::kOperator) return error_at(start, "unexpected character '" + std::string(1, c) + "'");
      if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
      if (t.text == ")" || t.text == "]" || t.text == "}") {
        if (depth == 0) return error_at(start, "unexpected '" + t.text + "'");
        --depth;
      }
    }
    tokens_.push_back(std::move(t));
    return ok_status();
  }

  // Integers (with `_` separators, 0x/0o/0b) and floats (1.5, 1e3, 1.5e-3), as jinja2's integer_re/float_re.
  Status lex_number(Token& t) {
    const size_t start = pos_;
    auto digits = [&](auto pred) {
      while (pos_ < src_.size() &&
             (pred(src_[pos_]) || (src_[pos_] == '_' && pos_ + 1 < src_.size() && pred(src_[pos_ + 1])))) {
        ++pos_;
      }
    };
    auto dec = [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; };
    const bool after_dot = start > 0 && src_[start - 1] == '.';  // `a.0.1`: item indices, never a float
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() && std::strchr("xXoObB", src_[pos_ + 1]) != nullptr &&
        src_[pos_ + 1] != '\0') {
      const int base = std::tolower(src_[pos_ + 1]) == 'x' ? 16 : std::tolower(src_[pos_ + 1]) == 'o' ? 8 : 2;
      pos_ += 2;
      const size_t digits_start = pos_;
      digits([base](char ch) {
        return base == 16 ? std::isxdigit(static_cast<unsigned char>(ch)) != 0
                          : ch >= '0' && ch < static_cast<char>('0' + base);
      });
      std::string clean;
      for (size_t i = digits_start; i < pos_; ++i) {
        if (src_[i] != '_') clean += src_[i];
      }
      if (clean.empty()) return error_at(start, "malformed number");
      errno = 0;
      t.type = TokenType::kInteger;
      t.int_value = static_cast<int64_t>(std::strtoull(clean.c_str(), nullptr, base));
      if (errno == ERANGE || clean.size() > 16) return error_at(start, "integer literal too large");
      return ok_status();
    }
    digits(dec);
    bool is_float = false;
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' && dec(src_[pos_ + 1])) {
      ++pos_;
      digits(dec);
      is_float = true;
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t k = pos_ + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && dec(src_[k])) {
        pos_ = k;
        digits(dec);
        is_float = true;
      }
    }
    std::string clean;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') clean += src_[i];
    }
    if (is_float) {
      t.type = TokenType::kFloat;
      t.float_value = std::strtod(clean.c_str(), nullptr);
    } else {
      if (clean.size() > 18) return error_at(start, "integer literal too large (beyond 64 bits)");
      t.type = TokenType::kInteger;
      t.int_value = std::stoll(clean);
    }
    return ok_status();
  }

  // A quoted string with Python's escapes decoded (jinja2: .encode("ascii", "backslashreplace")
  // .decode("unicode-escape")); an unknown escape such as \s stays as written.
  Status lex_string(Token& t) {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) return error_at(start, "unterminated string");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) return error_at(start, "unterminated string");
      const char e = src_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) return error_at(start, std::string("truncated \\") + e + " escape");
          const std::string hex = src_.substr(pos_, n);
          for (const char h : hex) {
            if (!std::isxdigit(static_cast<unsigned char>(h)))
              return error_at(start, std::string("truncated \\") + e + " escape");
          }
          const auto cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return error_at(start, "escape is not a valid code point");
          append_utf8(out, cp);
          pos_ += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            unsigned v = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k) {
              v = v * 8 + static_cast<unsigned>(src_[pos_++] - '0');
            }
            append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    t.type = TokenType::kString;
    t.text = std::move(out);
    return ok_status();
  }

  // Line and column (in code points) of an offset; positions are asked for in nearly increasing order, so a
  // cursor keeps this linear over the template.
  void set_position(Token& t, size_t offset) const {
    if (offset < cursor_offset_) cursor_offset_ = 0, cursor_line_ = 1, cursor_column_ = 1;
    for (size_t i = cursor_offset_; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++cursor_line_;
        cursor_column_ = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++cursor_column_;
      }
    }
    cursor_offset_ = offset;
    t.line = cursor_line_;
    t.column = cursor_column_;
  }

  Status error_at(size_t offset, const std::string& message) const {
    Token t;
    set_position(t, offset);
    return invalid_argument("TemplateSyntaxError: " + message + " (line " + std::to_string(t.line) + ", column " +
                            std::to_string(t.column) + ")");
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  mutable size_t cursor_offset_ = 0;
  mutable int cursor_line_ = 1;
  mutable int cursor_column_ = 1;
};

}  // namespace

StatusOr<std::vector<Token>> tokenize(std::string_view source) {
  if (!is_valid_utf8(source)) return invalid_argument("TemplateSyntaxError: the template is not valid UTF-8");
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace mmserve::chat_template
