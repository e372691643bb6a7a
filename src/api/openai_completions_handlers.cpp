// POST /v1/completions and /v1/chat/completions (see handlers.h): the body through openai_completions_codec, one
// request to InferenceServer for a Llama-family model (its LlamaInputs tokenises the prompt or renders the chat
// template), and the completion, or with stream=true server-sent events as text is detokenised.
//
// Streaming works as the audio routes do: the request is submitted with a text callback that queues one chunk per
// piece (on the engine thread); the HTTP worker waits for the first chunk or the end, so an error before any text
// (unknown model, a prompt too long, queue full) is an ordinary JSON error with its status code; after that the
// response is 200 text/event-stream and a failure is an error event. A client that hangs up makes the next write
// fail, and the next callback then cancels the sequence.
// Tests: tests/e2e/server_test.cpp (the real server with stories260K: curl-like requests and the openai npm client).
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

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

// Shared by the engine thread (text pieces, the result) and the HTTP worker writing the events.
class CompletionStream {
 public:
  CompletionStream(CompletionRequest request, std::string id, int64_t created)
      : request_(std::move(request)), id_(std::move(id)), created_(created) {}
  bool push_text(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (client_gone_) return false;
    events_.push_back(encode_completion_chunk(request_, id_, created_, text, first_));
    first_ = false;
    changed_.notify_all();
    return true;
  }
  void finish(StatusOr<serving::ResponseData> result) {
    std::lock_guard<std::mutex> lock(mutex_);
    result_ = std::move(result);
    finished_ = true;
    changed_.notify_all();
  }
  Status wait_started() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
    if (events_.empty() && !result_.ok()) return result_.status();
    return ok_status();
  }
  bool write_some(httplib::DataSink& sink) {
    std::deque<std::string> events;
    bool finished = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return finished_ || !events_.empty(); });
      events.swap(events_);
      finished = finished_;
      if (finished) {
        if (!result_.ok()) {
          events.push_back(encode_stream_error_event(http_status_for(result_.status().code()),
                                                     result_.status().message()));
          events.push_back("data: [DONE]\n\n");
        } else if (const auto* out = engine::output_as<engine::LlamaOutput>(result_->output)) {
          if (first_ && request_.chat) events.push_back(encode_completion_chunk(request_, id_, created_, "", true));
          events.push_back(encode_completion_end(
              request_, id_, created_, out->finish_reason,
              {static_cast<int64_t>(out->prompt_ids.size()), static_cast<int64_t>(out->ids.size())}));
        } else {
          events.push_back(encode_stream_error_event(400, "the model does not generate text"));
          events.push_back("data: [DONE]\n\n");
        }
      }
    }
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
  const CompletionRequest request_;
  const std::string id_;
  const int64_t created_;
  bool first_ = true;
  bool finished_ = false;
  bool client_gone_ = false;
  StatusOr<serving::ResponseData> result_ = Status(StatusCode::kInternal, "not finished");
};

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
  auto stream = std::make_shared<CompletionStream>(*parsed, id, created);
  parsed->params->on_text = [stream](const std::string& text) { return stream->push_text(text); };
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
