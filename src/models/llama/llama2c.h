// llama2.c's checkpoint and tokenizer files (Karpathy's run.c format, "v0") converted into an HF Llama directory
// (config.json, model.safetensors in f32, tokenizer.json, tokenizer_config.json, generation_config.json), so the
// real tiny Llama the team has (stories260K) runs through the same loader as every HF checkpoint.
//
// The checkpoint: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means an unshared classifier), then f32 tables in run.c's order. Converting follows HF's
// convert_llama_weights_to_hf.py: wq and wk rows are permuted from run.c's interleaved rotary pairs (2j, 2j+1) to
// HF's rotate_half pairs (j, j + head_dim / 2), which leaves every attention score unchanged.
// The tokenizer: int32 max_token_length, then per id a float score, an int32 length and the bytes. Ids 0-2 are
// <unk>, <s>, </s> (llama2.c writes the last two as "\n<s>\n" / "\n</s>\n"), 3-258 the byte tokens <0x00>..<0xFF>,
// the rest SentencePiece pieces with U+2581 written as ' '. tokenizer.json is what transformers' LlamaConverter
// builds from such a vocabulary: BPE with byte_fallback, merges ranked by the merged piece's score
// (SentencePieceExtractor), Prepend/Replace normalizers, the Replace/ByteFallback/Fuse/Strip decoder, BOS added.
// Every malformed or truncated file is kInvalidArgument naming the file and the field; nothing is written then.
// Tests: tests/conformance/llama_stories_test.cpp.
#pragma once

#include <string>

#include "core/status.h"

namespace mmserve::models {

Status convert_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path,
                       const std::string& out_dir);
// The same from the files' bytes; `checkpoint_label` / `tokenizer_label` name them in errors.
Status convert_llama2c_bytes(const std::string& checkpoint, const std::string& checkpoint_label,
                             const std::string& tokenizer, const std::string& tokenizer_label,
                             const std::string& out_dir);

// The demo decoder `mmserve serve` offers without a repository: stories260K (assets/llama2c, compiled into the
// binary) converted into `dir`.
Status write_demo_stories(const std::string& dir);

}  // namespace mmserve::models
