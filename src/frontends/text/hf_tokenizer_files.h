// Readers for the files of an HF tokenizer directory, shared by the CLIP and Whisper loaders: tokenizer.json's
// "model" (BPE) and "added_tokens", vocab.json, merges.txt, serialized AddedTokens and tokenizer_config.json's
// added_tokens_decoder. Every malformed input is a Status naming the file and the key or line; nlohmann is used
// through type-checked, non-throwing accessors only (the parse itself goes through core's read_json_file).
// Tests: tests/unit/frontends/text/clip_tokenizer_loader_test.cpp, whisper_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "frontends/text/added_vocabulary.h"
#include "frontends/text/bpe.h"

namespace mmserve::text::hf {

using Merges = std::vector<std::pair<std::string, std::string>>;

bool is_file(const std::string& path);
// The whole file as bytes; NotFound when it does not exist.
StatusOr<std::string> read_text_file(const std::string& path);
// j[key] when it is a boolean, else `fallback`.
bool bool_or(const nlohmann::json& j, const char* key, bool fallback);

// An AddedToken in any of HF's serialized forms: "text", or {"content": "text", "lstrip": ..., ...}.
// Defaults follow tokenizers' AddedToken: normalized = !special. The id is left at -1.
StatusOr<AddedToken> parse_added_token(const nlohmann::json& j, const std::string& label, bool special_default);
// A tokenizer.json component's "type" string ("" when `j` is not an object or has none).
std::string component_type(const nlohmann::json& j);
// A non-negative integer that fits an int32.
StatusOr<int32_t> parse_id(const nlohmann::json& j, const std::string& label);

// vocab.json / tokenizer.json's model.vocab: an object of token -> id.
StatusOr<Vocab> parse_vocab(const nlohmann::json& j, const std::string& label);
// merges.txt: an optional "#version" line, then one "a b" pair per line (blank lines ignored).
StatusOr<Merges> parse_merges_txt(const std::string& text, const std::string& path);
// tokenizer.json's model.merges: ["a b", ...] (legacy) or [["a", "b"], ...].
StatusOr<Merges> parse_merges_json(const nlohmann::json& j, const std::string& label);
// tokenizer.json's "model" as a BpeConfig (tokenizers' BPE parameters as written in the file: unk_token, fuse_unk,
// byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix); Unimplemented for other model
// types and for a non-zero dropout.
StatusOr<BpeConfig> parse_bpe_model(const nlohmann::json& model, const std::string& label);
// tokenizer.json's "added_tokens" array (absent or null: none), each with its id.
StatusOr<std::vector<AddedToken>> parse_added_tokens(const nlohmann::json& tokenizer, const std::string& label);
// tokenizer_config.json's "added_tokens_decoder" ({"id": AddedToken}) sorted by id; nullopt when
// absent or not an object.
StatusOr<std::optional<std::vector<AddedToken>>> parse_added_tokens_decoder(const nlohmann::json& config,
                                                                            const std::string& path);

}  // namespace mmserve::text::hf
