// .tiktoken parsing and the tiktoken -> BpeModel configuration (see tiktoken_ranks.h).
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#include "frontends/text/tiktoken_ranks.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "frontends/text/byte_level.h"

namespace mmserve::text {
namespace {

constexpr int32_t kRankMax = (1 << 24) - 1;  // BpeModel's id limit

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// Splits a line on runs of blanks (Python's str.split() over ASCII whitespace).
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    const size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

std::string printable(std::string_view s) {
  constexpr size_t kShown = 40;
  std::string out;
  for (const char c : s.substr(0, kShown)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) {
      out += c;
    } else {
      constexpr const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  if (s.size() > kShown) out += "...";
  return out;
}

}  // namespace

std::optional<std::string> base64_decode(std::string_view text) {
  size_t data = text.size();
  while (data > 0 && text[data - 1] == '=') --data;
  if (text.size() - data > 2 && data != 0) return std::nullopt;
  if (data % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(data * 3 / 4);
  uint32_t buffer = 0;
  int bits = 0;
  for (size_t i = 0; i < data; ++i) {
    const int v = base64_value(text[i]);
    if (v < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

StatusOr<std::vector<std::string>> parse_tiktoken(std::string_view contents, const std::string& label) {
  struct Entry {
    std::string bytes;
    int64_t rank;
    size_t line;
  };
  std::vector<Entry> entries;
  size_t line_number = 0;
  for (size_t pos = 0; pos < contents.size();) {
    size_t end = contents.find('\n', pos);
    if (end == std::string_view::npos) end = contents.size();
    const std::string_view line = contents.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    const std::vector<std::string_view> fields = split_fields(line);
    if (fields.empty()) continue;
    const std::string where = label + ": line " + std::to_string(line_number);
    if (fields.size() != 2) {
      return invalid_argument(where + ": expected \"<base64 token> <rank>\", got \"" + printable(line) + "\"");
    }
    auto bytes = base64_decode(fields[0]);
    if (!bytes) return invalid_argument(where + ": \"" + printable(fields[0]) + "\" is not base64");
    int64_t rank = 0;
    for (const char c : fields[1]) {
      if (c < '0' || c > '9' || rank > kRankMax) {
        return invalid_argument(where + ": the rank \"" + printable(fields[1]) + "\" is not an integer in [0, " +
                                std::to_string(kRankMax) + "]");
      }
      rank = rank * 10 + (c - '0');
    }
    if (rank > kRankMax) {
      return invalid_argument(where + ": the rank " + std::to_string(rank) + " is over " + std::to_string(kRankMax));
    }
    entries.push_back({std::move(*bytes), rank, line_number});
  }
  if (entries.empty()) return invalid_argument(label + ": no tokens");

  const size_t n = entries.size();
  std::vector<std::string> tokens(n);
  std::vector<size_t> line_of_rank(n, 0);
  std::unordered_map<std::string_view, size_t> line_of_token;
  line_of_token.reserve(n);
  for (Entry& e : entries) {
    const std::string where = label + ": line " + std::to_string(e.line);
    if (e.rank >= static_cast<int64_t>(n)) {
      return invalid_argument(where + ": rank " + std::to_string(e.rank) + " but the file has " + std::to_string(n) +
                              " tokens (ranks must be 0.." + std::to_string(n - 1) + ")");
    }
    const auto r = static_cast<size_t>(e.rank);
    if (line_of_rank[r] != 0) {
      return invalid_argument(where + ": rank " + std::to_string(r) + " is also on line " +
                              std::to_string(line_of_rank[r]));
    }
    line_of_rank[r] = e.line;
    tokens[r] = std::move(e.bytes);
    const auto [it, inserted] = line_of_token.emplace(tokens[r], e.line);
    if (!inserted) {
      return invalid_argument(where + ": token \"" + printable(tokens[r]) + "\" is also on line " +
                              std::to_string(it->second));
    }
  }
  for (int b = 0; b < 256; ++b) {
    if (line_of_token.find(std::string(1, static_cast<char>(b))) == line_of_token.end()) {
      return invalid_argument(label + ": no token for the single byte " + std::to_string(b) +
                              " (every byte must be a token)");
    }
  }
  return tokens;
}

BpeConfig tiktoken_bpe_config(const std::vector<std::string>& tokens) {
  BpeConfig config;
  std::vector<std::string> spelled(tokens.size());
  std::unordered_map<std::string_view, int32_t> rank_of;
  rank_of.reserve(tokens.size());
  config.vocab.reserve(tokens.size());
  for (size_t r = 0; r < tokens.size(); ++r) {
    spelled[r] = bytes_to_byte_level(tokens[r]);
    config.vocab.emplace(spelled[r], static_cast<int32_t>(r));
    rank_of.emplace(tokens[r], static_cast<int32_t>(r));
  }
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string_view token = tokens[r];
    for (size_t k = 1; k < token.size(); ++k) {
      const auto left = rank_of.find(token.substr(0, k));
      if (left == rank_of.end()) continue;
      const auto right = rank_of.find(token.substr(k));
      if (right == rank_of.end()) continue;
      config.merges.emplace_back(spelled[left->second], spelled[right->second]);
      config.merge_ranks.push_back(static_cast<int32_t>(r));
    }
  }
  return config;
}

}  // namespace mmserve::text
