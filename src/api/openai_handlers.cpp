// OpenAI-compatible route handlers (see handlers.h). Tests: tests/unit/api/http_server_test.cpp,
// tests/e2e/server_test.cpp.
#include "api/handlers.h"
#include "api/openai_codec.h"

namespace mmserve::api {

Reply handle_openai_models(const HandlerEnv& env) {
  return Reply{200, encode_openai_models(env.server.models(), env.server.adapters())};
}

Reply handle_openai_embeddings(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  const ApiFamily family = ApiFamily::kOpenAi;
  StatusOr<OpenAiEmbeddingRequest> parsed = parse_openai_embeddings(request.body, env.codec);
  if (!parsed.ok()) return error_reply(family, parsed.status());
  context.model = parsed->model;
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(family, options.status());

  // `model` may name a LoRA adapter on a CLIP model: the request runs on its base under it (the answer keeps the name).
  const ResolvedModel resolved = resolve_model(env, parsed->model);
  serving::RequestSpec spec;
  spec.model = resolved.model;
  if (!resolved.adapter.empty()) {
    auto params = std::make_shared<engine::ClipParams>();
    params->adapter = resolved.adapter;
    spec.params = std::move(params);
  }
  spec.inputs = std::move(parsed->inputs);
  spec.options = std::move(*options);
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
  if (!response.ok()) {
    const bool unknown_model = response.status().code() == StatusCode::kNotFound;
    return error_reply(family, response.status(), unknown_model ? "model_not_found" : "");
  }
  StatusOr<std::string> body = encode_openai_embeddings(*parsed, *response);
  if (!body.ok()) return error_reply(family, body.status());
  Reply reply{200, std::move(*body)};
  reply.headers.emplace_back("Server-Timing", server_timing(response->times));
  return reply;
}

}  // namespace mmserve::api
