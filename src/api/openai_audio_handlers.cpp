// POST /v1/audio/transcriptions and /v1/audio/translations (see handlers.h): the form fields through
// openai_audio_codec, one audio input to InferenceServer, and the transcript in the requested response_format
// (engine::format_transcript), or, with stream=true, server-sent events as segments finish.
//
// Streaming: the request is submitted with a segment callback that queues one delta event per finished segment
// (on the engine thread) into a TranscriptStream; the HTTP worker waits for the first event or the end. An
// error before any event (undecodable audio, unknown model, queue full...) is an ordinary JSON error with its
// status code; after that the response is 200 text/event-stream and a failure is an error event. A client that
// hangs up makes the next write fail, and the next segment callback then cancels the transcription.
// Tests: tests/unit/api/http_server_test.cpp (against a test double), tests/e2e (the real server, the openai
// npm client).
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "api/handlers.h"
#include "api/openai_audio_codec.h"

namespace mmserve::api {
namespace {

constexpr ApiFamily kFamily = ApiFamily::kOpenAi;

// Shared by the engine thread (segments, the result) and the HTTP worker writing the events.
class TranscriptStream {
 public:
  // Engine thread. false once the client has gone (cancels the transcription).
  bool push_segment(const engine::TranscriptSegment& segment) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client_gone_) return false;
    events_.push_back(encode_transcript_delta_event(segment.text));
    changed_.notify_all();
    return true;
  }
  // Called exactly once, after the last segment.
  void finish(StatusOr<serving::ResponseData> result) {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = std::move(result);
    finished_ = true;
    changed_.notify_all();
  }
  // Waits for the first event or the end; the error when the request failed before any event.
  Status wait_started() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
    if (events_.empty() && !result_.ok()) return result_.status();
    return ok_status();
  }
  // HTTP worker: writes what is queued (blocking until there is something); the done or error event last.
  bool write_some(httplib::DataSink& sink) {
    std::deque<std::string> events;
    bool finished = false;
    std::string last;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
      events.swap(events_);
      finished = finished_;
      if (finished) {
        if (!result_.ok()) {
          last = encode_stream_error_event(http_status_for(result_.status().code()), result_.status().message());
        } else if (const auto* out = engine::output_as<engine::TranscriptOutput>(result_->output)) {
          last = encode_transcript_done_event(out->transcript);
        } else {
          last = encode_stream_error_event(400, "the model does not transcribe audio");
        }
      }
    }
    if (finished) events.push_back(std::move(last));
    for (const std::string& e : events) {
      if (!sink.write(e.data(), e.size())) {
        std::lock_guard<std::mutex> lock(mutex_);
        client_gone_ = true;
        return false;
      }
    }
    if (finished) sink.done();
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> events_;
  bool finished_ = false;
  bool client_gone_ = false;
  StatusOr<serving::ResponseData> result_ = Status(StatusCode::kInternal, "not finished");
};

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

  auto stream = std::make_shared<TranscriptStream>();
  params->on_segment = [stream](const engine::TranscriptSegment& segment) { return stream->push_segment(segment); };
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
