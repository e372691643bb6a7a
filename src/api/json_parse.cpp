// JSON body parsing with the parser's exceptions turned into Status (see json_parse.h).
//
// The fast path is a small recursive-descent parser that builds the same nlohmann DOM as nlohmann's own parser
// but copies plain string bodies (printable ASCII, no escapes: every base64 payload) with one scan and one
// memcpy, where nlohmann's lexer appends them a character at a time (~1 ms for a 200 kB image element). It only
// accepts what it is sure nlohmann accepts identically, and gives up (returns nullopt) on anything else: a
// malformed body, a BOM, a float that overflows, an integer beyond 64 bits, nesting deeper than kDepthMax.
// Strings holding escapes or non-ASCII bytes are handed to nlohmann one literal at a time. A body the fast path
// gives up on is parsed again by nlohmann, so every error message is nlohmann's, unchanged.
// Tests: tests/unit/api/json_parse_test.cpp; fuzz/json_parse_fuzz.cpp checks that both paths build equal DOMs.
#include "api/json_parse.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace mmserve::api {
namespace {

using nlohmann::json;

constexpr int kDepthMax = 128;  // deeper bodies go to nlohmann's iterative parser

class FastParser {
 public:
  explicit FastParser(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  std::optional<json> parse_document() {
    json root;
    skip_whitespace();
    if (!parse_value(root, 0)) return std::nullopt;
    skip_whitespace();
    if (p_ != end_) return std::nullopt;
    return root;
  }

 private:
  void skip_whitespace() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool parse_value(json& out, int depth) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return parse_object(out, depth + 1);
      case '[': return parse_array(out, depth + 1);
      case '"': {
        std::string s;
        if (!parse_string(s)) return false;
        out = std::move(s);
        return true;
      }
      case 't': return parse_literal("true", json(true), out);
      case 'f': return parse_literal("false", json(false), out);
      case 'n': return parse_literal("null", json(nullptr), out);
      default: return parse_number(out);
    }
  }

  bool parse_literal(std::string_view word, json value, json& out) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    out = std::move(value);
    return true;
  }

  bool parse_object(json& out, int depth) {
    if (depth > kDepthMax) return false;
    ++p_;  // '{'
    out = json::object();
    skip_whitespace();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    while (true) {
      skip_whitespace();
      if (p_ == end_ || *p_ != '"') return false;
      std::string key;
      if (!parse_string(key)) return false;
      skip_whitespace();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      skip_whitespace();
      // nlohmann's DOM builder assigns through operator[]: a repeated key keeps its last value, as here.
      if (!parse_value(out[std::move(key)], depth)) return false;
      skip_whitespace();
      if (p_ == end_) return false;
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
    }
  }

  bool parse_array(json& out, int depth) {
    if (depth > kDepthMax) return false;
    ++p_;  // '['
    out = json::array();
    skip_whitespace();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    while (true) {
      skip_whitespace();
      json element;
      if (!parse_value(element, depth)) return false;
      out.push_back(std::move(element));
      skip_whitespace();
      if (p_ == end_) return false;
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
    }
  }

  // True for a byte nlohmann's lexer copies as it is: printable ASCII and DEL, except '"' and '\'.
  static bool plain_byte(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

  // The length of the run of plain bytes from `s`, eight at a time while it can.
  static size_t plain_run(const char* s, const char* end) {
    const char* q = s;
    constexpr uint64_t kOnes = 0x0101010101010101ull;
    constexpr uint64_t kHigh = 0x8080808080808080ull;
    while (end - q >= 8) {
      uint64_t w;
      std::memcpy(&w, q, 8);
      // A lane is flagged when it is < 0x20, >= 0x80, '"' or '\' (the classic haszero(w ^ c) tricks; the
      // flags are exact for the first flagged lane, which is all the scan below needs).
      const uint64_t control = (w - kOnes * 0x20) & ~w;
      const uint64_t quote = ((w ^ (kOnes * '"')) - kOnes) & ~(w ^ (kOnes * '"'));
      const uint64_t backslash = ((w ^ (kOnes * '\\')) - kOnes) & ~(w ^ (kOnes * '\\'));
      if (((control | quote | backslash) & kHigh) != 0 || (w & kHigh) != 0) break;
      q += 8;
    }
    while (q != end && plain_byte(static_cast<unsigned char>(*q))) ++q;
    return static_cast<size_t>(q - s);
  }

  bool parse_string(std::string& out) {
    const char* start = p_ + 1;  // after '"'
    const char* q = start + plain_run(start, end_);
    if (q != end_ && *q == '"') {
      out.assign(start, q);
      p_ = q + 1;
      return true;
    }
    // An escape or a non-ASCII byte: find the closing quote (the first '"' not escaped) and let nlohmann decode
    // and validate that one literal.
    while (q != end_ && *q != '"') q += *q == '\\' && q + 1 != end_ ? 2 : 1;
    if (q == end_) return false;
    try {
      json decoded = json::parse(p_, q + 1);
      if (!decoded.is_string()) return false;
      out = std::move(decoded.get_ref<std::string&>());
    } catch (const json::exception&) {
      return false;
    }
    p_ = q + 1;
    return true;
  }

  // The JSON number grammar, then nlohmann's typing: no fraction or exponent -> unsigned (or signed with a '-')
  // when it fits 64 bits, else a finite double. Integers that overflow and infinite doubles give up: nlohmann
  // turns the first into a double and refuses the second, and the slow path does exactly that.
  bool parse_number(json& out) {
    const char* s = p_;
    const char* q = p_;
    const bool negative = q != end_ && *q == '-';
    if (negative) ++q;
    if (q == end_) return false;
    if (*q == '0') {
      ++q;
    } else if (*q >= '1' && *q <= '9') {
      while (q != end_ && *q >= '0' && *q <= '9') ++q;
    } else {
      return false;
    }
    bool integer = true;
    if (q != end_ && *q == '.') {
      integer = false;
      ++q;
      if (q == end_ || *q < '0' || *q > '9') return false;
      while (q != end_ && *q >= '0' && *q <= '9') ++q;
    }
    if (q != end_ && (*q == 'e' || *q == 'E')) {
      integer = false;
      ++q;
      if (q != end_ && (*q == '+' || *q == '-')) ++q;
      if (q == end_ || *q < '0' || *q > '9') return false;
      while (q != end_ && *q >= '0' && *q <= '9') ++q;
    }
    p_ = q;
    if (integer && negative) {
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(s, q, v);
      if (ec != std::errc() || ptr != q) return false;
      out = v;
      return true;
    }
    if (integer) {
      uint64_t v = 0;
      const auto [ptr, ec] = std::from_chars(s, q, v);
      if (ec != std::errc() || ptr != q) return false;
      out = v;
      return true;
    }
    double v = 0;
    const auto [ptr, ec] = std::from_chars(s, q, v);
    if (ec != std::errc() || ptr != q || !std::isfinite(v)) return false;
    out = v;
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace

StatusOr<nlohmann::json> parse_json_nlohmann(std::string_view text) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ..."; keep from "parse error".
    std::string message = e.what();
    const size_t start = message.find("parse error");
    return invalid_argument("malformed JSON: " + (start == std::string::npos ? message : message.substr(start)));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("malformed JSON: ") + e.what());
  }
}

std::optional<nlohmann::json> parse_json_fast(std::string_view text) {
  try {
    return FastParser(text).parse_document();
  } catch (const std::bad_alloc&) {
    return std::nullopt;  // nlohmann's parser reports it as it always has
  }
}

bool json_same_dom(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
      if (ia.key() != ib.key() || !json_same_dom(ia.value(), ib.value())) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_same_dom(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

StatusOr<nlohmann::json> parse_json(std::string_view text) {
  if (std::optional<nlohmann::json> fast = parse_json_fast(text)) return std::move(*fast);
  return parse_json_nlohmann(text);
}

}  // namespace mmserve::api
