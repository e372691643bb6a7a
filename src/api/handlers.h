// The route handlers behind HttpServer: each parses its request with a codec, calls InferenceServer and
// serialises the answer into a Reply. No business logic lives here (validation of what a model accepts,
// scheduling and batching are serving's).
//
// Handlers never throw on client input (codecs return Status); HttpServer still catches anything that escapes
// and answers 500. Tests: tests/unit/api/http_server_test.cpp drives every handler over real HTTP against a test
// double of InferenceServer.
#pragma once

#include <httplib.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/error_mapping.h"
#include "api/kserve_codec.h"
#include "api/request_context.h"
#include "serving/inference_server.h"

namespace mmserve::engine {
struct LlamaOutput;
}

namespace mmserve::api {

struct Reply {
  Reply() = default;
  Reply(int status_code, std::string body_text, std::string type = "application/json")
      : status(status_code), body(std::move(body_text)), content_type(std::move(type)) {}
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed response (server-sent events): the body is written with chunked encoding by calling
  // this on the HTTP worker until it calls sink.done() or returns false (the client has gone). `body` is unused.
  std::function<bool(httplib::DataSink& sink)> stream;
};

struct HandlerEnv {
  serving::InferenceServer& server;
  CodecOptions codec;
  bool shutting_down = false;
};

// An error reply in the family's JSON shape; 429 carries Retry-After: 1, 401 WWW-Authenticate: Bearer.
Reply error_reply(ApiFamily family, int http_status, const std::string& message, const std::string& openai_code = "");
Reply error_reply(ApiFamily family, const Status& status, const std::string& openai_code = "");

// RequestOptions from the headers (`x-mmserve-priority`, `x-mmserve-timeout-ms`) overridden by body values;
// also records the priority in the context. kInvalidArgument for malformed values.
StatusOr<serving::RequestOptions> request_options(RequestContext& context, const httplib::Request& request,
                                                  std::optional<int> body_priority,
                                                  std::optional<double> body_timeout_ms);
// `queue;dur=1.200, preprocess;dur=..., compute;dur=..., total;dur=...` (milliseconds).
std::string server_timing(const serving::PhaseTimes& times);
// A generation's: the same phases plus `prefill` (joining the engine's batch -> the first token) and `decode` (the
// first token -> the last), the decoders' trace spans (docs/api.md, Server-Timing).
std::string server_timing(const serving::PhaseTimes& times, const engine::ModelOutput& output);
// LoRA adapters (lora_handlers.cpp): POST /v1/load_lora_adapter {"lora_name", "lora_path", "base_model"?} and
// /v1/unload_lora_adapter {"lora_name"} as vLLM has them (403 unless the server allows runtime updating), and
// GET /v2/adapters (the registry). A request's `model` may name an adapter: resolve_model gives the base model to
// submit to and the adapter for the family's params (empty when `model` is a model).
Reply handle_load_lora_adapter(const HandlerEnv& env, const httplib::Request& request, bool load);
Reply handle_adapters(const HandlerEnv& env);
struct ResolvedModel {
  std::string model, adapter;
};
ResolvedModel resolve_model(const HandlerEnv& env, const std::string& requested);

// x-mmserve-trace-routing: a Mixtral answer's routing trace onto the current request's span (its access-log line),
// when the answer carries one; likewise gate routing's choice of adapters. Called on the HTTP worker (for streams: from their end events, written there).
void record_routing_in_span(const engine::LlamaOutput& out);

// KServe v2 (kserve_handlers.cpp). `model`/`version` are the path segments (version empty when absent).
// Only version "1" exists (docs/api.md): the 404 reply for any other explicit version, nullopt when fine.
std::optional<Reply> check_model_version(const std::string& model, const std::string& version);
Reply handle_model_metadata(const HandlerEnv& env, const std::string& model, const std::string& version);
Reply handle_model_ready(const HandlerEnv& env, const std::string& model, const std::string& version);
Reply handle_kserve_infer(const HandlerEnv& env, RequestContext& context, const httplib::Request& request);
// POST /v2/models/{m}/generate and /generate_stream (kserve_generate_handlers.cpp): Llama-family models.
Reply handle_kserve_generate(const HandlerEnv& env, RequestContext& context, const httplib::Request& request,
                             bool stream);
Reply handle_repository_index(const HandlerEnv& env, const httplib::Request& request);
Reply handle_repository_load(const HandlerEnv& env, const std::string& model, const httplib::Request& request,
                             bool load);

// OpenAI-compatible (openai_handlers.cpp).
Reply handle_openai_models(const HandlerEnv& env);
Reply handle_openai_embeddings(const HandlerEnv& env, RequestContext& context, const httplib::Request& request);
// POST /v1/segment (sam_handlers.cpp): JSON (api/sam_codec.h).
Reply handle_segment(const HandlerEnv& env, RequestContext& context, const httplib::Request& request);
// POST /v1/completions and /v1/chat/completions (openai_completions_handlers.cpp): Llama-family models.
Reply handle_openai_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request);
Reply handle_openai_chat_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request);
// POST /v1/audio/transcriptions and /v1/audio/translations (openai_audio_handlers.cpp): multipart/form-data.
Reply handle_openai_audio(const HandlerEnv& env, RequestContext& context, const httplib::Request& request,
                          engine::WhisperTask task);

}  // namespace mmserve::api
