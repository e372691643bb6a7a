// tiktoken's BPE file format (".tiktoken": one "<base64 token bytes> <rank>" line per token, what the reference
// `whisper` package ships in whisper/assets/) and its merge rule expressed for BpeModel.
//
// Why BpeModel computes exactly tiktoken's `_byte_pair_merge`: tiktoken ranks an adjacent pair of parts by the
// rank of their concatenated bytes (MAX when that is not a token), merges the lowest-ranked pair, the leftmost
// one on a tie, and repeats. tiktoken_bpe_config() lists, for every token T of rank r, every split of T into
// two tokens (L, R) as a merge (L, R) -> T of rank r, so BpeModel's pair table holds exactly "rank of the
// concatenation" for every pair of tokens; its heap pops the lowest (rank, start) among the live pairs (stale
// entries are re-checked and skipped), i.e. the lowest rank and, on a tie, the leftmost pair - tiktoken's choice
// at every step, so the final parts are the same. tiktoken's other rule, a whole pre-token that is itself a
// token becomes that token without merging, is the caller's (WhisperTokenizer).
// Tests: tests/unit/frontends/text/whisper_tokenizer_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "frontends/text/bpe.h"

namespace mmserve::text {

// Decodes standard base64 (RFC 4648 alphabet, '=' padding optional; a lone "=" is the empty string, as
// Python's b64decode reads it). nullopt for any other character or an impossible length.
std::optional<std::string> base64_decode(std::string_view text);

// Parses a .tiktoken file into the token bytes of each rank (index = rank). Lines are "<base64> <rank>"
// separated by spaces or tabs; blank lines are skipped and "\r\n" is accepted. The ranks must be exactly
// 0..n-1, each token must be distinct, and every single byte must be a token (tiktoken cannot encode text
// otherwise). InvalidArgument naming `label` and the 1-based line number otherwise.
StatusOr<std::vector<std::string>> parse_tiktoken(std::string_view contents, const std::string& label);

// The BpeModel configuration equivalent to tiktoken over `tokens` (index = rank): vocabulary = the tokens in
// GPT-2's byte-level spelling with their ranks as ids, merges = every two-token split of every token, ranked
// by that token's rank (see the file comment).
BpeConfig tiktoken_bpe_config(const std::vector<std::string>& tokens);

}  // namespace mmserve::text
