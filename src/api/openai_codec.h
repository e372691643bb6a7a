// OpenAI-compatible request parsing and response writing: POST /v1/embeddings and GET /v1/models.
//
// `input` is a string or a non-empty array of strings; an item that is a data URL
// (`data:image/png;base64,...`) is an image, an http(s) URL is refused, everything else is text (token-id arrays
// are refused: this server tokenizes itself). `encoding_format` "float" (default) answers JSON arrays,
// "base64" the base64 of the little-endian float32 bytes, as OpenAI does. Unknown fields are refused with
// OpenAI's own message ("Unrecognized request argument supplied: X"). Tests: tests/unit/api/openai_codec_test.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/kserve_codec.h"  // CodecOptions
#include "core/status.h"
#include "serving/inference_server.h"
#include "serving/request.h"

namespace mmserve::api {

struct OpenAiEmbeddingRequest {
  std::string model;
  std::vector<serving::InputItem> inputs;  // request order (moved into the spec)
  size_t input_count = 0;                  // inputs.size() as parsed, kept for the response
  bool base64 = false;                     // encoding_format == "base64"
};

StatusOr<OpenAiEmbeddingRequest> parse_openai_embeddings(std::string_view body, const CodecOptions& options = {});

// kInternal when `response` does not match the request.
StatusOr<std::string> encode_openai_embeddings(const OpenAiEmbeddingRequest& request,
                                               const serving::ResponseData& response);

// `{"object": "list", "data": [{"id", "object": "model", "created": 0, "owned_by": "mmserve"}]}` of READY models.
// READY models, then the LoRA adapters with their `parent` (the base model) and `root` (the directory), as vLLM.
std::string encode_openai_models(const std::vector<serving::ModelStatus>& models,
                                 const std::vector<serving::AdapterStatus>& adapters = {});

}  // namespace mmserve::api
