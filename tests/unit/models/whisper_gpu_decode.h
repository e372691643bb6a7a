// Decoding loops the Whisper GPU tests share (whisper_cuda_test.cpp, whisper_cuda_tp_test.cpp): one row over one
// encoder window, teacher forced along HF's golden ids or free running (argmax), on any WhisperBackend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "models/whisper/whisper_decoding.h"

namespace mmserve::models::testing {

inline int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);  // first index on ties, as torch
}

// The logits of every step when `tokens` are fed after `prompt` (steps = tokens.size()).
inline std::vector<std::vector<float>> forced_logits(WhisperBackend& m, const Tensor& mel,
                                                     const std::vector<int32_t>& prompt,
                                                     const std::vector<int32_t>& tokens) {
  auto encoded = m.encode(mel);
  EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
  auto rows = m.new_rows(static_cast<int64_t>(prompt.size() + tokens.size()));
  EXPECT_TRUE(rows.ok()) << rows.status().to_string();
  if (!encoded.ok() || !rows.ok()) return {};
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  Status s = (*rows)->prefill(*encoded, {0}, {prompt}, logits);
  EXPECT_TRUE(s.ok()) << s.to_string();
  out.push_back(logits);
  for (size_t i = 0; i + 1 < tokens.size() && s.ok(); ++i) {
    s = (*rows)->step({tokens[i]}, logits);
    EXPECT_TRUE(s.ok()) << s.to_string();
    out.push_back(logits);
  }
  return out;
}

// Free-running greedy decoding of `steps` tokens after `prompt` (no eos stop).
inline std::vector<int32_t> greedy(WhisperBackend& m, const Tensor& mel, const std::vector<int32_t>& prompt,
                                   int64_t steps) {
  auto encoded = m.encode(mel);
  EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
  auto rows = m.new_rows(static_cast<int64_t>(prompt.size()) + steps);
  EXPECT_TRUE(rows.ok());
  if (!encoded.ok() || !rows.ok()) return {};
  const int64_t vocab = m.config().vocab_size;
  std::vector<float> logits;
  std::vector<int32_t> out;
  Status s = (*rows)->prefill(*encoded, {0}, {prompt}, logits);
  while (s.ok()) {
    out.push_back(argmax(logits.data(), vocab));
    if (static_cast<int64_t>(out.size()) == steps) break;
    s = (*rows)->step({out.back()}, logits);
  }
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

}  // namespace mmserve::models::testing
