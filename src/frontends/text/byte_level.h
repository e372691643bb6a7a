// GPT-2's byte-level alphabet: every byte maps to one printable Unicode character, so BPE can work on text
// without an unknown symbol. Bytes 33-126, 161-172 and 174-255 map to themselves; the other 68 bytes map, in
// order, to U+0100..U+0143 (byte 0x20 ' ' -> U+0120 'Ġ'). This is `bytes_to_unicode()` of GPT-2 / CLIP and the
// table of HF's ByteLevel pre-tokenizer and decoder.
// Tests: tests/unit/frontends/text/bpe_test.cpp.
#pragma once

#include <string>
#include <string_view>

namespace mmserve::text {

// The byte-level spelling of raw bytes (each byte becomes the UTF-8 of its mapped character).
std::string bytes_to_byte_level(std::string_view bytes);

// The inverse, as HF's ByteLevel decoder does it for one token: the original bytes when every character of
// `token` is in the alphabet, else the token's own UTF-8 unchanged. Appends to `out`.
void byte_level_to_bytes(std::string_view token, std::string& out);

}  // namespace mmserve::text
