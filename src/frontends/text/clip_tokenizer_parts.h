// Internal: the assembled stages of a ClipTokenizer, handed from the loaders (clip_tokenizer_loader.cpp) to
// the encoder (clip_tokenizer.cpp). Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "frontends/text/added_vocabulary.h"
#include "frontends/text/bpe.h"
#include "frontends/text/clip_tokenizer.h"
#include "frontends/text/text_pipeline.h"

namespace mmserve::text {

struct ClipTokenizerParts {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  std::vector<int32_t> prefix_ids;  // post-processor: ids before the text (CLIP: <|startoftext|>)
  std::vector<int32_t> suffix_ids;  // and after it (CLIP: <|endoftext|>)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int model_max_length = 77;
};

std::unique_ptr<ClipTokenizer> make_clip_tokenizer(ClipTokenizerParts parts);

}  // namespace mmserve::text
