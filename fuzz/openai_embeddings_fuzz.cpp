// libFuzzer target for the OpenAI embeddings request codec (api/openai_codec.h): parse_openai_embeddings on
// arbitrary bodies (image URLs are refused as 400; the first byte is skipped, as the corpus was made with it).
//
// The codec must return a Status for anything malformed (bad JSON, wrong types, unknown fields, token-id arrays,
// bad data URLs and base64, empty inputs), never crash or leak. An accepted request has as many inputs as it
// reports and a model name.
// Seeds (fuzz/corpus/openai_embeddings_fuzz): a string input, an array with a data URL, base64 encoding, and
// broken ones (not JSON, unknown field, token ids, an http URL, a truncated data URL, nesting).
// Run: build/fuzz/fuzz/openai_embeddings_fuzz -max_total_time=60 fuzz/corpus/openai_embeddings_fuzz.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "api/openai_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1 << 20)) return 0;
  const mmserve::api::CodecOptions options;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto request = mmserve::api::parse_openai_embeddings(body, options);
  if (request.ok() && (request->inputs.size() != request->input_count || request->inputs.empty())) std::abort();
  return 0;
}
