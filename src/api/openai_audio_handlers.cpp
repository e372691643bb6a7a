// POST /v1/audio/transcriptions and /v1/audio/translations (see handlers.h): the form fields through
// openai_audio_codec, one audio input to InferenceServer, and the transcript in the requested response_format
// (engine::format_transcript), or, with stream=true, server-sent events as segments finish.
//
// Streaming: the request is submitted with a segment callback that queues one delta event per finished segment
// (on the engine thread) into an EventStream (event_stream.h: an error before any event is an ordinary JSON
// error, after it an error event; a client that hangs up cancels the transcription at the next segment).
// Tests: tests/unit/api/http_server_test.cpp (against a test double), tests/e2e (the real server, the openai
// npm client).
#include <memory>

#include "api/event_stream.h"
#include "api/handlers.h"
#include "api/openai_audio_codec.h"

namespace mmserve::api {
namespace {

constexpr ApiFamily kFamily = ApiFamily::kOpenAi;

Reply failure(const Status& status) {
  return error_reply(kFamily, status, status.code() == StatusCode::kNotFound ? "model_not_found" : "");
}

}  // namespace

Reply handle_openai_audio(const HandlerEnv& env, RequestContext& context, const httplib::Request& request,
                          engine::WhisperTask task) {
  std::vector<FormField> fields;
  for (const auto& [name, part] : request.files) {
    fields.push_back({part.name, part.filename, part.content_type, part.content});
  }
  // httplib's map is ordered by name; body order only matters for repeated fields, whose order is kept.
  StatusOr<OpenAiTranscriptionRequest> parsed = parse_openai_audio_form(fields, task);
  if (!parsed.ok()) return error_reply(kFamily, parsed.status());
  context.model = parsed->model;
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(kFamily, options.status());

  serving::RequestSpec spec;
  spec.model = parsed->model;
  serving::InputItem audio;
  audio.kind = serving::InputKind::kAudioBytes;
  audio.audio_bytes = std::move(parsed->audio);
  spec.inputs.push_back(std::move(audio));
  spec.options = std::move(*options);
  auto params = std::make_shared<engine::WhisperParams>();
  params->options = parsed->options;
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };

  if (!parsed->stream) {
    spec.params = std::move(params);
    StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
    if (!response.ok()) return failure(response.status());
    const auto* out = engine::output_as<engine::TranscriptOutput>(response->output);
    if (out == nullptr) {
      return error_reply(kFamily, invalid_argument("model '" + parsed->model + "' does not transcribe audio"));
    }
    Reply reply{200, engine::format_transcript(out->transcript, parsed->format, task),
                engine::transcript_content_type(parsed->format)};
    reply.headers.emplace_back("Server-Timing", server_timing(response->times));
    return reply;
  }

  auto stream = std::make_shared<EventStream>([](const StatusOr<serving::ResponseData>& result, bool) {
    if (!result.ok()) {
      return std::vector<std::string>{
          encode_stream_error_event(http_status_for(result.status().code()), result.status().message())};
    }
    if (const auto* out = engine::output_as<engine::TranscriptOutput>(result->output)) {
      return std::vector<std::string>{encode_transcript_done_event(out->transcript)};
    }
    return std::vector<std::string>{encode_stream_error_event(400, "the model does not transcribe audio")};
  });
  params->on_segment = [stream](const engine::TranscriptSegment& segment) {
    return stream->push(encode_transcript_delta_event(segment.text));
  };
  spec.params = std::move(params);
  env.server.submit(std::move(spec),
                    [stream](StatusOr<serving::ResponseData> result) { stream->finish(std::move(result)); });
  if (Status started = stream->wait_started(); !started.ok()) return failure(started);
  Reply reply;
  reply.content_type = "text/event-stream";
  reply.stream = [stream](httplib::DataSink& sink) { return stream->write_some(sink); };
  return reply;
}

}  // namespace mmserve::api
