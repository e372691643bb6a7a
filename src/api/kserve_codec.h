// KServe v2 (Open Inference Protocol) request parsing and response writing for the CLIP tensors of
// docs/api.md: JSON tensors and the binary tensor data extension, both ways.
//
// Inputs `text` (BYTES [N], UTF-8), `image` (BYTES [M], base64 of an encoded image in JSON, raw bytes in the
// binary extension) and `pixel_values` (FP32 [M, 3, S, S]) become serving::InputItem's in request order; for
// Whisper models `audio` (BYTES [1]: the encoded audio file, base64 in JSON, raw bytes in the binary extension)
// with the optional request parameters language (string), task ("transcribe" | "translate"), timestamps (bool),
// prompt (string), temperature (0..1) and beam_size (1..16); the response's outputs are then `text`,
// `segments` (a JSON array, OpenAI's verbose_json segments) and `language`, each BYTES [1].
// Everything a client can get wrong is a kInvalidArgument whose message names the input and the problem:
// malformed JSON, unknown or duplicate fields, wrong types and datatypes, negative or overflowing shapes, a
// data length that does not match the shape, invalid base64 or UTF-8, binary sections that are truncated,
// overlap the end or leave bytes unused. The codec never calls the server: it only converts. Tests:
// tests/unit/api/kserve_codec_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/clip_executor.h"
#include "engine/sam_executor.h"
#include "engine/whisper_executor.h"
#include "serving/inference_server.h"
#include "serving/request.h"

namespace mmserve::api {

// Options of the request codecs that come from the server's flags (none today: image URLs are always refused,
// docs/api.md "Images").
struct CodecOptions {};

struct KServeOutputRequest {
  std::string name;
  bool binary = false;
};

struct KServeInferRequest {
  std::optional<std::string> id;
  std::vector<serving::InputItem> inputs;    // request order; texts and images may interleave (moved into the spec)
  std::vector<serving::InputKind> kinds;     // inputs[i].kind, kept for the response after the inputs are moved
  std::optional<int> priority;               // parameters.priority
  std::optional<double> timeout_ms;          // parameters.timeout_ms
  bool binary_output = false;                // parameters.binary_data_output: every output binary by default
  std::vector<KServeOutputRequest> outputs;  // empty: every output the inputs produce
  engine::TranscribeOptions transcribe;      // from the parameters (used by Whisper models only)
  bool multimask_output = true;              // parameters.multimask_output (SAM)
  std::string image_id;                      // parameters.image_id (SAM: an earlier request's image)
};

// The request parameters every family may read (each family's preparer takes its own base).
struct KServeParams final : engine::WhisperParams, engine::SamParams, engine::ClipParams {};
// The family options of a parsed request; `adapter`: the LoRA adapter the URL's model name resolved to (CLIP).
std::shared_ptr<const KServeParams> kserve_params(const KServeInferRequest& request, const std::string& adapter = "");

// Parses an infer request body. `json_length` is the Inference-Header-Content-Length header (binary extension):
// the first `json_length` bytes are the JSON header and the rest the binary tensor data; nullopt = all JSON.
StatusOr<KServeInferRequest> parse_kserve_infer(std::string_view body, std::optional<size_t> json_length,
                                                const CodecOptions& options = {});

// Parses the Inference-Header-Content-Length header value against the body size.
StatusOr<size_t> parse_inference_header_length(std::string_view value, size_t body_size);

struct EncodedBody {
  std::string body;
  std::string content_type = "application/json";
  std::optional<size_t> json_length;  // set when the body uses the binary extension
};

// Writes the infer response: text_embeds [N, D], image_embeds [M, D], logits_per_image [M, N] (when both), or the
// requested subset; binary outputs follow the JSON header. Uses request.kinds (not inputs). kInvalidArgument for a
// requested output the inputs cannot produce; kInternal when `response` does not match the request (a serving
// bug, reported not crashed).
StatusOr<EncodedBody> encode_kserve_infer(const std::string& model, const KServeInferRequest& request,
                                          const serving::ResponseData& response);

// Writes a Whisper response: `text`, `segments`, `language` (BYTES [1] each) or the requested subset, JSON or
// binary (4-byte little-endian length + bytes per element) as requested (kserve_transcript.cpp).
StatusOr<EncodedBody> encode_kserve_transcript(const std::string& model, const KServeInferRequest& request,
                                               const engine::Transcript& transcript);

// Writes a SAM response (kserve_sam.cpp): `iou_scores` FP32 [k], `masks` BYTES [k] (each a COCO RLE JSON object
// {"size": [H, W], "counts": "..."}), `image_id` BYTES [1], or the requested subset.
StatusOr<EncodedBody> encode_kserve_sam(const std::string& model, const KServeInferRequest& request,
                                        const engine::SamOutput& output);

std::string encode_server_metadata();
std::string encode_model_metadata(const serving::ModelMetadata& metadata);
// `[{"name", "version", "state", "reason"}]`; ready_only keeps READY models (Triton's `{"ready": true}`).
std::string encode_repository_index(const std::vector<serving::ModelStatus>& models, bool ready_only);
// Parses the optional body of POST /v2/repository/index: empty, `{}` or `{"ready": bool}` -> ready_only.
StatusOr<bool> parse_repository_index(std::string_view body);
// Parses the optional body of load/unload: empty, `{}` or `{"parameters": {...}}` (parameters are ignored).
Status parse_repository_action(std::string_view body);

}  // namespace mmserve::api
