// POST /v2/models/{m}/generate and /generate_stream (KServe v2's generate extension as Triton has it; see
// handlers.h): the body through kserve_generate_codec, one request to InferenceServer for a Llama-family model, and
// {"text_output", ...}, or server-sent events with each piece of text as it is detokenised. Errors are KServe's
// {"error": "..."} with the infer routes' status codes (error_mapping); a model that does not generate text is a
// 400. Streaming works as the completions routes do (event_stream.h): an error before any text is an ordinary JSON
// error, after it a last `data: {"error": ...}` event; a client that hangs up cancels the sequence.
// Tests: tests/e2e/generate_server_test.cpp, tests/e2e/generate_client_test.py (the real server, stories260K).
#include <memory>

#include "api/event_stream.h"
#include "api/handlers.h"
#include "api/request_options.h"
#include "api/kserve_generate_codec.h"

namespace mmserve::api {
namespace {

constexpr ApiFamily kFamily = ApiFamily::kKServe;

Status not_generating(const std::string& model) {
  return invalid_argument("model '" + model.substr(0, 64) + "' does not generate text (the generate extension " +
                          "serves Llama-family models)");
}

}  // namespace

Reply handle_kserve_generate(const HandlerEnv& env, RequestContext& context, const httplib::Request& request,
                             bool stream) {
  if (std::optional<Reply> bad = check_model_version(context.model, context.version)) return *bad;
  StatusOr<CompletionRequest> parsed = parse_generate_request(request.body, context.model);
  if (!parsed.ok()) return error_reply(kFamily, parsed.status());
  parsed->params->trace_routing = parse_trace_routing_header(request.get_header_value("x-mmserve-trace-routing"));
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(kFamily, options.status());
  const ResolvedModel resolved = resolve_model(env, context.model);  // a LoRA adapter's name: its base, under it
  parsed->params->adapter = resolved.adapter;
  serving::RequestSpec spec;
  spec.model = resolved.model;
  serving::InputItem text;
  text.kind = serving::InputKind::kText;
  text.text = *parsed->prompt;
  spec.inputs.push_back(std::move(text));
  for (serving::InputItem& image : parsed->images) spec.inputs.push_back(std::move(image));
  spec.options = std::move(*options);
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  const std::string model = context.model;
  if (!stream) {
    spec.params = parsed->params;
    StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
    if (!response.ok()) return error_reply(kFamily, response.status());
    const auto* out = engine::output_as<engine::LlamaOutput>(response->output);
    if (out == nullptr) return error_reply(kFamily, not_generating(model));
    Reply reply{200, encode_generate(model, *out)};
    record_routing_in_span(*out);
    reply.headers.emplace_back("Server-Timing", server_timing(response->times, *out));
    return reply;
  }
  auto events = std::make_shared<EventStream>([model](const EventStream::Result& result, bool) {
    const auto* out = result.ok() ? engine::output_as<engine::LlamaOutput>(result->output) : nullptr;
    if (out == nullptr) {
      return std::vector<std::string>{
          encode_generate_error_event((result.ok() ? not_generating(model) : result.status()).message())};
    }
    record_routing_in_span(*out);  // made on the HTTP worker, in the request's context
    return std::vector<std::string>{encode_generate_end(model, *out)};
  });
  // Engine thread only. The params hold this callback, which holds the stream: the stream holds no params.
  parsed->params->on_delta = [events, model](const engine::TextDelta& delta) {
    return events->push(encode_generate_delta(model, delta.text));
  };
  spec.params = parsed->params;
  spec.cancelled = [events, peer = context.peer] { return events->abandoned() || (peer != nullptr && peer->gone()); };
  env.server.submit(std::move(spec), [events](StatusOr<serving::ResponseData> result) {
    events->finish(std::move(result));
  });
  if (Status started = events->wait_started(); !started.ok()) return error_reply(kFamily, started);
  Reply reply;
  reply.content_type = "text/event-stream";
  reply.stream = [events](httplib::DataSink& sink) { return events->write_some(sink); };
  return reply;
}

}  // namespace mmserve::api
