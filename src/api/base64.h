// Base64 (RFC 4648 section 4, the standard alphabet) as the APIs use it: KServe BYTES image elements and
// data URLs arrive base64-encoded; OpenAI's `encoding_format: "base64"` answers with it.
//
// Decoding is strict, so that a corrupted payload is a clear 400 rather than a garbled image: only the
// standard alphabet, padding only at the end and only as much as the length needs (unpadded input is
// accepted, as many encoders omit it), no whitespace, and the unused low bits of the last character must be
// zero. Tests: tests/unit/api/base64_test.cpp.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mmserve::api {

std::string base64_encode(std::string_view bytes);

// kInvalidArgument naming the first bad offset. Whole 4-character groups are decoded through lookup tables, 3
// bytes at a time; errors are reported by the bitwise decoder below, so the two always agree.
StatusOr<std::string> base64_decode(std::string_view text);
// The same contract, one character at a time (the reference the fast decoder falls back to, and the benchmark's
// baseline).
StatusOr<std::string> base64_decode_bitwise(std::string_view text);

}  // namespace mmserve::api
