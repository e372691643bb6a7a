// GPT-2 byte <-> character tables, built once (function-local statics, thread-safe initialisation).
// Tests: tests/unit/frontends/text/bpe_test.cpp.
#include "frontends/text/byte_level.h"

#include <array>
#include <cstdint>

#include "frontends/text/unicode_text.h"

namespace mmserve::text {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 0x144> char_to_byte;  // code point -> byte, -1 when not in the alphabet
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r;
    r.char_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      append_utf8(cp, r.byte_to_utf8[b]);
      r.char_to_byte[cp] = static_cast<int16_t>(b);
    }
    return r;
  }();
  return t;
}

}  // namespace

std::string bytes_to_byte_level(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

void byte_level_to_bytes(std::string_view token, std::string& out) {
  const Tables& t = tables();
  std::string bytes;
  bytes.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const char32_t cp = next_code_point(token, i);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      out.append(token);
      return;
    }
    bytes.push_back(static_cast<char>(t.char_to_byte[cp]));
  }
  out += bytes;
}

}  // namespace mmserve::text
