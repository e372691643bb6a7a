// Strict base64 encoding and decoding (see base64.h). Tests: tests/unit/api/base64_test.cpp.
#include "api/base64.h"

#include <array>
#include <cstdint>

namespace mmserve::api {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = -1;
  for (int i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kDecode = make_decode_table();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

namespace {

// kDecodeShifted[k][c]: the 6 bits of character c placed for position k of a 4-character group (bits 18, 12,
// 6, 0 of the 24-bit group), or kBad for a character outside the alphabet (so one OR of four lookups tells
// whether a whole group is valid).
constexpr uint32_t kBad = 1u << 24;
constexpr std::array<std::array<uint32_t, 256>, 4> make_shifted_tables() {
  std::array<std::array<uint32_t, 256>, 4> tables{};
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < 256; ++c) {
      const int8_t v = kDecode[static_cast<size_t>(c)];
      tables[static_cast<size_t>(k)][static_cast<size_t>(c)] =
          v < 0 ? kBad : static_cast<uint32_t>(v) << (18 - 6 * k);
    }
  }
  return tables;
}
constexpr std::array<std::array<uint32_t, 256>, 4> kDecodeShifted = make_shifted_tables();

}  // namespace

StatusOr<std::string> base64_decode_bitwise(std::string_view text) {
  size_t padding = 0;
  while (padding < 2 && text.size() > padding && text[text.size() - 1 - padding] == '=') ++padding;
  const std::string_view body = text.substr(0, text.size() - padding);
  if (padding > 0 && text.size() % 4 != 0) {
    return invalid_argument("invalid base64: padding does not complete a 4-character group");
  }
  if (body.size() % 4 == 1) return invalid_argument("invalid base64: length " + std::to_string(text.size()));
  std::string out;
  out.reserve(body.size() / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const int8_t v = kDecode[static_cast<uint8_t>(body[i])];
    if (v < 0) {
      return invalid_argument("invalid base64: unexpected character at offset " + std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0) {
    return invalid_argument("invalid base64: non-zero trailing bits");
  }
  return out;
}

// Whole 4-character groups through the shifted tables, 3 bytes out per group; the last partial group (and any
// error, to report it exactly as the bitwise decoder does) goes to base64_decode_bitwise.
StatusOr<std::string> base64_decode(std::string_view text) {
  // The last group may hold padding or be partial: leave it (and everything when the text is short) to the
  // bitwise decoder, which also owns every error message.
  const size_t groups = text.size() >= 8 ? (text.size() - 1) / 4 : 0;
  if (groups == 0) return base64_decode_bitwise(text);
  std::string out;
  out.resize(groups * 3);
  const auto* in = reinterpret_cast<const uint8_t*>(text.data());
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  uint32_t bad = 0;
  for (size_t g = 0; g < groups; ++g, in += 4, dst += 3) {
    const uint32_t v = kDecodeShifted[0][in[0]] | kDecodeShifted[1][in[1]] | kDecodeShifted[2][in[2]] |
                       kDecodeShifted[3][in[3]];
    bad |= v;
    dst[0] = static_cast<uint8_t>(v >> 16);
    dst[1] = static_cast<uint8_t>(v >> 8);
    dst[2] = static_cast<uint8_t>(v);
  }
  if ((bad & kBad) != 0) return base64_decode_bitwise(text);  // names the first bad offset
  StatusOr<std::string> tail = base64_decode_bitwise(text.substr(groups * 4));
  if (!tail.ok()) return base64_decode_bitwise(text);  // offsets and lengths as the whole text has them
  out += *tail;
  return out;
}

}  // namespace mmserve::api
