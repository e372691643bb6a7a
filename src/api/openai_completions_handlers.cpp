// POST /v1/completions and /v1/chat/completions (see handlers.h): the body through openai_completions_codec, one
// request to InferenceServer for a Llama-family model (its LlamaInputs tokenises the prompt or renders the chat
// template), and the completion, or with stream=true server-sent events as text is detokenised.
//
// Streaming works as the audio routes do (event_stream.h): a text callback queues one chunk per piece on the engine
// thread; an error before any text (unknown model, a prompt too long, queue full) is an ordinary JSON error, after it
// an error event; a client that hangs up cancels the sequence at its next piece.
// Tests: tests/e2e/server_test.cpp (the real server with stories260K: curl-like requests and the openai npm client).
#include <chrono>
#include <memory>

#include "api/event_stream.h"
#include "api/handlers.h"
#include "api/openai_audio_codec.h"
#include "api/openai_completions_codec.h"

namespace mmserve::api {
namespace {

constexpr ApiFamily kFamily = ApiFamily::kOpenAi;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Reply failure(const Status& status) {
  return error_reply(kFamily, status, status.code() == StatusCode::kNotFound ? "model_not_found" : "");
}

Reply handle_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request, bool chat) {
  StatusOr<CompletionRequest> parsed = parse_completion_request(request.body, chat);
  if (!parsed.ok()) return error_reply(kFamily, parsed.status());
  context.model = parsed->model;
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(kFamily, options.status());
  serving::RequestSpec spec;
  spec.model = parsed->model;
  if (parsed->prompt) {
    serving::InputItem text;
    text.kind = serving::InputKind::kText;
    text.text = *parsed->prompt;
    spec.inputs.push_back(std::move(text));
  }
  spec.options = std::move(*options);
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  const std::string id = completion_id(chat);
  const int64_t created = unix_now();
  if (!parsed->stream) {
    spec.params = parsed->params;
    StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
    if (!response.ok()) return failure(response.status());
    const auto* out = engine::output_as<engine::LlamaOutput>(response->output);
    if (out == nullptr) {
      return error_reply(kFamily, invalid_argument("model '" + parsed->model + "' does not generate text"));
    }
    Reply reply{200, encode_completion(*parsed, id, created, *out)};
    reply.headers.emplace_back("Server-Timing", server_timing(response->times));
    return reply;
  }
  // What the encoders read (model, chat, include_usage), without the params: the params hold the callback that
  // holds the stream, so the stream holding them back would be a reference cycle.
  CompletionRequest r = *parsed;
  r.params.reset();
  auto stream = std::make_shared<EventStream>([r, id, created](const StatusOr<serving::ResponseData>& result,
                                                               bool pushed_any) {
    std::vector<std::string> events;
    const auto* out = result.ok() ? engine::output_as<engine::LlamaOutput>(result->output) : nullptr;
    if (out == nullptr) {
      const Status error = result.ok() ? invalid_argument("the model does not generate text") : result.status();
      events.push_back(encode_stream_error_event(http_status_for(error.code()), error.message()));
      events.push_back("data: [DONE]\n\n");
      return events;
    }
    if (!pushed_any && r.chat) events.push_back(encode_completion_chunk(r, id, created, "", true));  // the role
    events.push_back(encode_completion_end(
        r, id, created, out->finish_reason,
        {static_cast<int64_t>(out->prompt_ids.size()), static_cast<int64_t>(out->ids.size())}));
    return events;
  });
  // Engine thread only (one sequence's callback): the first chunk of a chat stream says the role.
  parsed->params->on_delta = [stream, r, id, created, first = true](const engine::TextDelta& delta) mutable {
    const bool was_first = first;
    first = false;
    return stream->push(encode_completion_chunk(r, id, created, delta.text, was_first));
  };
  spec.params = parsed->params;
  env.server.submit(std::move(spec),
                    [stream](StatusOr<serving::ResponseData> result) { stream->finish(std::move(result)); });
  if (Status started = stream->wait_started(); !started.ok()) return failure(started);
  Reply reply;
  reply.content_type = "text/event-stream";
  reply.stream = [stream](httplib::DataSink& sink) { return stream->write_some(sink); };
  return reply;
}

}  // namespace

Reply handle_openai_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  return handle_completions(env, context, request, /*chat=*/false);
}

Reply handle_openai_chat_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  return handle_completions(env, context, request, /*chat=*/true);
}

}  // namespace mmserve::api
