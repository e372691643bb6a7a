// The HTTP server: pre-routing checks, dispatch to the handlers, error bodies for what httplib answers itself,
// and the metrics/access-log hook (see http_server.h). Exceptions from handlers (none are expected: codecs
// return Status) are caught here and answered 500; the process never dies on a request.
// Tests: tests/unit/api/http_server_test.cpp, tests/e2e/server_test.cpp.
#include "api/http_server.h"

#include <new>

#include "api/handlers.h"
#include "api/json_writer.h"
#include "api/request_context.h"
#include "api/request_options.h"
#include "api/route_table.h"
#include "api/topology_handler.h"

namespace mmserve::api {
namespace {

using httplib::Request;
using httplib::Response;

void answer(Response& response, Reply reply) {
  response.status = reply.status;
  response.headers.erase("Content-Type");
  for (auto& [key, value] : reply.headers) response.set_header(key, value);
  if (reply.stream) {
    if (RequestContext* context = current_request_context()) context->streaming = true;
    response.set_header("Cache-Control", "no-cache");
    response.set_chunked_content_provider(
        reply.content_type,
        [stream = std::move(reply.stream)](size_t, httplib::DataSink& sink) { return stream(sink); });
    return;
  }
  response.body = std::move(reply.body);
  response.set_header("Content-Type", reply.content_type);
}

bool is_audio_route(RouteId id) {
  return id == RouteId::kOpenAiTranscriptions || id == RouteId::kOpenAiTranslations;
}

const char* reason_for(int status) {
  switch (status) {
    case 400: return "bad request";
    case 404: return "not found";
    case 405: return "method not allowed";
    case 408: return "request timeout";
    case 411: return "length required";
    case 413: return "request body too large";
    case 414: return "request URI too long";
    case 415: return "unsupported media type";
    case 416: return "range not satisfiable";
    case 431: return "request headers too large";
    default: return status >= 500 ? "internal server error" : "request refused";
  }
}

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::create(serving::InferenceServer& server, HttpServerOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<AccessLog> log, AccessLog::open(options.access_log_path));
  std::unique_ptr<HttpServer> out(new HttpServer(server, std::move(options), std::move(log)));
  out->install();
  return out;
}

HttpServer::HttpServer(serving::InferenceServer& server, HttpServerOptions options, std::unique_ptr<AccessLog> log)
    : server_(server),
      options_(std::move(options)),
      log_(std::move(log)),
      metrics_(server.metrics()),
      http_(options_.transport) {}

HttpServer::~HttpServer() {
  begin_shutdown();
  finish_shutdown(std::chrono::hours(1));
}

Status HttpServer::bind() {
  return http_.bind(options_.host, options_.port);
}
void HttpServer::run() {
  http_.run();
}
void HttpServer::begin_shutdown() {
  http_.begin_shutdown();
}
bool HttpServer::finish_shutdown(std::chrono::milliseconds timeout) {
  return http_.finish_shutdown(timeout);
}

void HttpServer::install() {
  http_.set_pre_routing_handler([this](const Request& request, Response& response) {
    if (precheck(request, response)) return httplib::Server::HandlerResponse::Handled;
    http_.read_accepted_body();  // only now: a refused request's body is never read (nor 100 Continue sent)
    return httplib::Server::HandlerResponse::Unhandled;
  });
  auto handler = [this](const Request& request, Response& response) { handle(request, response); };
  http_.Get(".*", handler);
  http_.Post(".*", handler);
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const Request& request, Response& response) { return fill_error(request, response); }));
  http_.set_exception_handler([](const Request& request, Response& response, std::exception_ptr error) {
    std::string message = "internal error";
    try {
      if (error) std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message += std::string(": ") + e.what();
    } catch (...) {
    }
    answer(response, error_reply(family_of_path(request.path), 500, message));
  });
  http_.set_logger([this](const Request& request, const Response& response) { record(request, response); });
}

bool HttpServer::precheck(const Request& request, Response& response) {
  RequestContext* context = current_request_context();
  if (context == nullptr || context->checked) return false;
  context->checked = true;
  response.set_header("traceparent", context->trace.traceparent());
  // A refused request whose body was sent is not read: the connection closes after the answer.
  auto refuse = [&](Reply reply) {
    answer(response, std::move(reply));
    if (context->request_bytes > 0) {
      context->close_connection = true;
      response.set_header("Connection", "close");
    }
    return true;
  };
  const RouteMatch match = match_route(request.method, request.path);
  if (match.route != nullptr) context->route = match.route->pattern;  // also for the early refusals' metrics
  if (context->early_status != 0) {
    return refuse(error_reply(family_of_path(request.path), context->early_status, context->early_message));
  }
  if (match.route == nullptr) {
    if (!match.allow.empty()) {
      Reply reply = error_reply(family_of_path(request.path), 405,
                                "method " + request.method + " is not allowed here; use " + match.allow);
      reply.headers.emplace_back("Allow", match.allow);
      return refuse(std::move(reply));
    }
    return refuse(error_reply(family_of_path(request.path), 404,
                              "no route " + request.method + " " + request.path.substr(0, 256)));
  }
  const Route& route = *match.route;
  if (!route.has_body && context->request_bytes > 0) {  // httplib does not read a GET's body: do not parse it
    context->close_connection = true;
    response.set_header("Connection", "close");
  }
  context->route_index = static_cast<int>(&route - routes().data());
  context->model = match.model;
  context->version = match.version;
  if (route.needs_key && options_.keys.enabled()) {
    const std::optional<std::string> token = bearer_token(request.get_header_value("Authorization"));
    if (!token) return refuse(error_reply(route.family, 401, "missing API key: send Authorization: Bearer KEY"));
    const std::optional<std::string> tenant = options_.keys.tenant_of(*token);
    if (!tenant) return refuse(error_reply(route.family, 401, "invalid API key"));
    context->tenant = *tenant;
  }
  if (route.has_body && context->request_bytes > 0) {
    const std::string type = request.get_header_value("Content-Type");
    const BodyKind kind = classify_content_type(type);
    const bool binary_allowed = (route.id == RouteId::kModelInfer || route.id == RouteId::kModelVersionInfer) &&
                                request.has_header("Inference-Header-Content-Length");
    if (is_audio_route(route.id)) {
      if (kind != BodyKind::kMultipart) {
        return refuse(error_reply(route.family, 415,
                                  "Content-Type '" + type.substr(0, 100) +
                                      "' is not supported here: send multipart/form-data with the audio as 'file'"));
      }
    } else if (kind == BodyKind::kOther || kind == BodyKind::kMultipart ||
               (kind == BodyKind::kOctetStream && !binary_allowed)) {
      return refuse(error_reply(route.family, 415,
                                "Content-Type '" + type.substr(0, 100) +
                                    "' is not supported: send application/json (or application/octet-stream with "
                                    "Inference-Header-Content-Length for binary tensors)"));
    }
  }
  return false;
}

void HttpServer::handle(const Request& request, Response& response) {
  RequestContext* context = current_request_context();
  if (context == nullptr || context->route_index < 0) {
    answer(response, error_reply(family_of_path(request.path), 500, "internal error: request was not routed"));
    return;
  }
  const Route& route = routes()[static_cast<size_t>(context->route_index)];
  const HandlerEnv env{server_, CodecOptions{}, http_.shutting_down()};
  Reply reply;
  try {
    switch (route.id) {
      case RouteId::kServerMetadata: reply = Reply{200, encode_server_metadata()}; break;
      case RouteId::kHealthLive: {
        const bool live = server_.live();
        reply = Reply{live ? 200 : 503, live ? "{\"live\":true}" : "{\"live\":false}"};
        break;
      }
      case RouteId::kHealthReady: {
        const bool ready = server_.ready() && !env.shutting_down;
        reply = Reply{ready ? 200 : 503, ready ? "{\"ready\":true}" : "{\"ready\":false}"};
        break;
      }
      case RouteId::kModelMetadata:
      case RouteId::kModelVersionMetadata: reply = handle_model_metadata(env, context->model, context->version); break;
      case RouteId::kModelReady:
      case RouteId::kModelVersionReady: reply = handle_model_ready(env, context->model, context->version); break;
      case RouteId::kModelInfer:
      case RouteId::kModelVersionInfer: reply = handle_kserve_infer(env, *context, request); break;
      case RouteId::kModelGenerate:
      case RouteId::kModelVersionGenerate: reply = handle_kserve_generate(env, *context, request, false); break;
      case RouteId::kModelGenerateStream:
      case RouteId::kModelVersionGenerateStream: reply = handle_kserve_generate(env, *context, request, true); break;
      case RouteId::kRepositoryIndex: reply = handle_repository_index(env, request); break;
      case RouteId::kRepositoryLoad: reply = handle_repository_load(env, context->model, request, true); break;
      case RouteId::kRepositoryUnload: reply = handle_repository_load(env, context->model, request, false); break;
      case RouteId::kOpenAiModels: reply = handle_openai_models(env); break;
      case RouteId::kOpenAiEmbeddings: reply = handle_openai_embeddings(env, *context, request); break;
      case RouteId::kSegment: reply = handle_segment(env, *context, request); break;
      case RouteId::kOpenAiCompletions: reply = handle_openai_completions(env, *context, request); break;
      case RouteId::kOpenAiChatCompletions: reply = handle_openai_chat_completions(env, *context, request); break;
      case RouteId::kOpenAiTranscriptions:
        reply = handle_openai_audio(env, *context, request, engine::WhisperTask::kTranscribe);
        break;
      case RouteId::kOpenAiTranslations:
        reply = handle_openai_audio(env, *context, request, engine::WhisperTask::kTranslate);
        break;
      case RouteId::kMetrics:
        reply = Reply{200, server_.metrics().expose(), "text/plain; version=0.0.4; charset=utf-8"};
        break;
      case RouteId::kHealthz: {
        const bool ready = server_.ready() && !env.shutting_down;
        reply = Reply{ready ? 200 : 503, ready ? "ok" : "not ready", "text/plain; charset=utf-8"};
        break;
      }
      case RouteId::kDebugTopology: reply = handle_debug_topology(options_.topology); break;
      case RouteId::kLoadLoraAdapter: reply = handle_load_lora_adapter(env, request, true); break;
      case RouteId::kUnloadLoraAdapter: reply = handle_load_lora_adapter(env, request, false); break;
      case RouteId::kAdapters: reply = handle_adapters(env); break;
    }
  } catch (const std::bad_alloc&) {
    reply = error_reply(route.family, 500, "internal error: out of memory");
  } catch (const std::exception& e) {
    reply = error_reply(route.family, 500, std::string("internal error: ") + e.what());
  }
  answer(response, std::move(reply));
}

httplib::Server::HandlerResponse HttpServer::fill_error(const Request& request, Response& response) {
  // Called for every status >= 400 before it is written; only fills what httplib answered itself.
  RequestContext* context = current_request_context();
  if (context != nullptr && context->trace.trace_id.empty()) context->trace = make_trace_context("");
  if (context != nullptr && !response.has_header("traceparent")) {
    response.set_header("traceparent", context->trace.traceparent());
  }
  if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  std::string message = reason_for(response.status);
  if (response.status == 413) {
    message += ": the limit is " + std::to_string(options_.transport.body_bytes_max) + " bytes (--max-body-mb)";
  }
  if (response.status == 400 && request.is_multipart_form_data()) {
    // httplib's multipart parser refused the body (no boundary, a broken part header, no closing boundary).
    message =
        "malformed multipart/form-data body (a missing boundary parameter, a broken part header or a body "
        "cut short before the closing boundary)";
  }
  answer(response, error_reply(family_of_path(request.path), response.status, message));
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::record(const Request& request, const Response& response) {
  const RequestContext* context = current_request_context();
  if (context == nullptr) return;
  const double seconds = std::chrono::duration<double>(serving::Clock::now() - context->start).count();
  metrics_.observe(request.method, context->route, response.status, seconds);
  AccessLogEntry entry;
  entry.method = method_label(request.method);
  entry.path = request.path;
  entry.route = context->route;
  entry.status = response.status;
  entry.duration_ms = seconds * 1000.0;
  entry.bytes = response.body.size();
  entry.bytes_in = context->request_bytes;
  entry.model = context->model;
  entry.trace_id = context->trace.trace_id;
  entry.span_id = context->trace.span_id;
  entry.tenant = context->tenant;
  entry.priority = context->priority;
  entry.remote = request.remote_addr;
  entry.routing = context->routing;
  entry.adapters = context->adapters;
  log_->write(entry);
}

}  // namespace mmserve::api
