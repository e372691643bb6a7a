// POST /v1/completions and /v1/chat/completions (see handlers.h): the body through openai_completions_codec, n
// requests to InferenceServer for a Llama-family model (one per choice: copies of the params, choice i with seed +
// i; its LlamaInputs tokenises the prompt or renders the chat template), and the completion, or with stream=true
// server-sent events as text is detokenised, the chunks of all choices interleaved as they come.
//
// Streaming works as the audio routes do (event_stream.h), one stream for the n choices: a delta callback per
// choice queues its chunks on the engine thread; a choice that ends queues its finish chunk; the usage chunk and
// [DONE] come once all ended. An error before any text (unknown model, a prompt too long, queue full) is an
// ordinary JSON error and cancels the other choices; after it an error event; a client that hangs up cancels every
// choice at its next token.
// Streamed logprobs take their token strings from the tokenizer each delta carries.
// Tests: tests/e2e/generate_server_test.cpp, tests/e2e/generate_client_test.py, tests/e2e/openai/completions.test.mjs
// (the real server with stories260K).
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "api/event_stream.h"
#include "api/handlers.h"
#include "api/json_writer.h"
#include "api/request_context.h"
#include "api/request_options.h"
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

// The request's spec for one choice (inputs, options, cancellation) with `params`.
serving::RequestSpec choice_spec(const serving::RequestSpec& common, std::shared_ptr<engine::LlamaParams> params) {
  serving::RequestSpec spec;
  spec.model = common.model;
  spec.inputs = common.inputs;
  spec.options = common.options;
  spec.cancelled = common.cancelled;
  spec.params = std::move(params);
  return spec;
}

// Runs the n choices at once and waits for all; the first failure (other than the cancels it caused) wins.
StatusOr<std::vector<serving::ResponseData>> infer_choices(const HandlerEnv& env, const CompletionRequest& r,
                                                           const serving::RequestSpec& common) {
  struct Gather {
    std::mutex mutex;
    std::condition_variable done;
    size_t left = 0;
    bool failed = false;
    std::vector<StatusOr<serving::ResponseData>> results;
  };
  auto g = std::make_shared<Gather>();
  g->left = static_cast<size_t>(r.n);
  g->results.assign(g->left, Status(StatusCode::kInternal, "not finished"));
  for (int64_t i = 0; i < r.n; ++i) {
    serving::RequestSpec spec = choice_spec(common, choice_params(r, i));
    spec.cancelled = [g, peer = common.cancelled] {
      {
        std::lock_guard<std::mutex> lock(g->mutex);
        if (g->failed) return true;
      }
      return peer && peer();
    };
    env.server.submit(std::move(spec), [g, i](StatusOr<serving::ResponseData> result) {
      std::lock_guard<std::mutex> lock(g->mutex);
      if (!result.ok()) g->failed = true;
      g->results[static_cast<size_t>(i)] = std::move(result);
      if (--g->left == 0) g->done.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(g->mutex);
  g->done.wait(lock, [&] { return g->left == 0; });
  std::vector<serving::ResponseData> out;
  const Status* cancelled = nullptr;
  for (const auto& result : g->results) {
    if (!result.ok()) {
      if (result.status().code() != StatusCode::kCancelled) return result.status();
      cancelled = &result.status();
    } else {
      out.push_back(*result);
    }
  }
  if (cancelled != nullptr) return *cancelled;
  return out;
}

Reply handle_whole(const HandlerEnv& env, const CompletionRequest& r, const serving::RequestSpec& common,
                   const std::string& id, int64_t created) {
  StatusOr<std::vector<serving::ResponseData>> responses = infer_choices(env, r, common);
  if (!responses.ok()) return failure(responses.status());
  std::vector<const engine::LlamaOutput*> outs;
  for (const serving::ResponseData& response : *responses) {
    const auto* out = engine::output_as<engine::LlamaOutput>(response.output);
    if (out == nullptr) return error_reply(kFamily, invalid_argument("model '" + r.model + "' does not generate text"));
    outs.push_back(out);
  }
  Reply reply{200, encode_completion(r, id, created, outs)};
  record_routing_in_span(*outs.front());  // the span carries the first choice's routing too
  reply.headers.emplace_back("Server-Timing", server_timing(responses->front().times, *outs.front()));
  return reply;
}

Reply handle_stream(const HandlerEnv& env, const CompletionRequest& parsed, const serving::RequestSpec& common,
                    const std::string& id, int64_t created) {
  // What the encoders read (model, chat, n, logprobs, include_usage), without the params: the params hold the
  // callbacks that hold the stream, so the stream holding them back would be a reference cycle.
  CompletionRequest r = parsed;
  r.params.reset();
  const size_t n = static_cast<size_t>(r.n);
  // Choice i's state: written by its engine thread's callback, then (after its last delta) by its end.
  auto states = std::make_shared<std::vector<ChoiceStream>>(n);
  for (size_t i = 0; i < n; ++i) (*states)[i].index = static_cast<int64_t>(i);
  auto part_end = [r, id, created, states](size_t i, const EventStream::Result& result) {
    const auto* out = engine::output_as<engine::LlamaOutput>(result->output);
    if (out == nullptr) return std::vector<std::string>();
    return std::vector<std::string>{encode_choice_end(r, id, created, (*states)[i], *out)};
  };
  auto end = [r, id, created](const std::vector<EventStream::Result>& results, bool) {
    std::vector<std::string> events;
    std::vector<const engine::LlamaOutput*> outs;
    for (const EventStream::Result& result : results) {
      const auto* out = result.ok() ? engine::output_as<engine::LlamaOutput>(result->output) : nullptr;
      if (out == nullptr) {
        const Status error = result.ok() ? invalid_argument("the model does not generate text") : result.status();
        events.push_back(encode_stream_error_event(http_status_for(error.code()), error.message()));
        events.push_back("data: [DONE]\n\n");
        return events;
      }
      outs.push_back(out);
    }
    record_routing_in_span(*outs.front());  // end events are made on the HTTP worker, in the request's context
    events.push_back(encode_stream_end(r, id, created, completion_usage(outs)));
    return events;
  };
  auto stream = std::make_shared<EventStream>(n, part_end, end);
  for (size_t i = 0; i < n; ++i) {
    std::shared_ptr<engine::LlamaParams> params = choice_params(parsed, static_cast<int64_t>(i));
    // Engine thread only (one sequence's callback).
    params->on_delta = [stream, states, r, id, created, i](const engine::TextDelta& delta) {
      return stream->push(encode_completion_chunk(r, id, created, (*states)[i], delta, delta.tokenizer));
    };
    serving::RequestSpec spec = choice_spec(common, std::move(params));
    spec.cancelled = [stream, peer = common.cancelled] { return stream->abandoned() || (peer && peer()); };
    env.server.submit(std::move(spec), [stream, i](StatusOr<serving::ResponseData> result) {
      stream->finish_part(i, std::move(result));
    });
  }
  if (Status started = stream->wait_started(); !started.ok()) return failure(started);
  Reply reply;
  reply.content_type = "text/event-stream";
  reply.stream = [stream](httplib::DataSink& sink) { return stream->write_some(sink); };
  return reply;
}

Reply handle_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request, bool chat) {
  StatusOr<CompletionRequest> parsed = parse_completion_request(request.body, chat);
  if (!parsed.ok()) return error_reply(kFamily, parsed.status());
  parsed->params->trace_routing = parse_trace_routing_header(request.get_header_value("x-mmserve-trace-routing"));
  context.model = parsed->model;
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(kFamily, options.status());
  // `model` may name a LoRA adapter: the request goes to its base model under it (the answer keeps the name).
  const ResolvedModel resolved = resolve_model(env, parsed->model);
  if (!resolved.adapter.empty()) {
    if (parsed->params->adapter == "auto") {
      return error_reply(kFamily, invalid_argument("'adapter': \"auto\" goes with a base model, not an adapter"));
    }
    parsed->params->adapter = resolved.adapter;
  }
  serving::RequestSpec common;
  common.model = resolved.model;
  if (parsed->prompt) {
    serving::InputItem text;
    text.kind = serving::InputKind::kText;
    text.text = *parsed->prompt;
    common.inputs.push_back(std::move(text));
  }
  for (serving::InputItem& image : parsed->images) common.inputs.push_back(std::move(image));
  common.options = std::move(*options);
  common.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  const std::string id = completion_id(chat);
  const int64_t created = unix_now();
  return parsed->stream ? handle_stream(env, *parsed, common, id, created)
                        : handle_whole(env, *parsed, common, id, created);
}

}  // namespace

void record_routing_in_span(const engine::LlamaOutput& out) {
  RequestContext* context = current_request_context();
  if (context == nullptr) return;
  if (out.routing_k > 0) context->routing = dump_json(routing_json(out));
  if (!out.routed_adapters.empty()) context->adapters = dump_json(adapters_json(out));  // gate routing's choice
}

Reply handle_openai_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  return handle_completions(env, context, request, /*chat=*/false);
}

Reply handle_openai_chat_completions(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  return handle_completions(env, context, request, /*chat=*/true);
}

}  // namespace mmserve::api
