// KServe v2 route handlers and the helpers every inference handler shares (see handlers.h).
// Tests: tests/unit/api/http_server_test.cpp, tests/e2e/server_test.cpp.
#include <algorithm>
#include <charconv>
#include <cstdio>

#include "api/handlers.h"
#include "api/json_writer.h"
#include "api/kserve_codec.h"
#include "api/request_options.h"

namespace mmserve::api {
namespace {

constexpr const char* kInferenceHeader = "Inference-Header-Content-Length";

}  // namespace

std::optional<Reply> check_model_version(const std::string& model, const std::string& version) {
  if (version.empty() || version == "1") return std::nullopt;
  return error_reply(ApiFamily::kKServe, 404,
                     "model '" + model.substr(0, 64) + "' has no version '" + version.substr(0, 16) + "' (only 1)");
}

Reply error_reply(ApiFamily family, int http_status, const std::string& message, const std::string& openai_code) {
  Reply reply;
  reply.status = http_status;
  reply.body = error_body(family, http_status, message, openai_code);
  if (http_status == 429) reply.headers.emplace_back("Retry-After", "1");
  if (http_status == 401) reply.headers.emplace_back("WWW-Authenticate", "Bearer");
  return reply;
}

Reply error_reply(ApiFamily family, const Status& status, const std::string& openai_code) {
  return error_reply(family, http_status_for(status.code()), status.message(), openai_code);
}

StatusOr<serving::RequestOptions> request_options(RequestContext& context, const httplib::Request& request,
                                                  std::optional<int> body_priority,
                                                  std::optional<double> body_timeout_ms) {
  serving::RequestOptions options;
  options.tenant = context.tenant;
  options.trace_id = context.trace.trace_id;
  if (request.has_header("x-mmserve-priority")) {
    ASSIGN_OR_RETURN(options.priority, parse_priority_header(request.get_header_value("x-mmserve-priority")));
  }
  if (body_priority) options.priority = *body_priority;
  std::optional<double> timeout_ms;
  if (request.has_header("x-mmserve-timeout-ms")) {
    ASSIGN_OR_RETURN(timeout_ms, parse_timeout_header(request.get_header_value("x-mmserve-timeout-ms")));
  }
  if (body_timeout_ms) timeout_ms = body_timeout_ms;
  if (timeout_ms) {
    options.deadline = context.start + std::chrono::duration_cast<serving::Clock::duration>(
                                           std::chrono::duration<double, std::milli>(*timeout_ms));
  }
  context.priority = options.priority;
  return options;
}

std::string server_timing(const serving::PhaseTimes& t) {
  // What "%.3f" prints (both round the exact binary value), without printf's cost on every response.
  std::string out;
  out.reserve(96);
  char buf[64];
  auto add = [&](const char* name, double ms) {
    out += name;
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), ms, std::chars_format::fixed, 3);
    out.append(buf, r.ec == std::errc() ? r.ptr : buf);
  };
  add("queue;dur=", t.queue_ms);
  add(", preprocess;dur=", t.preprocess_ms);
  add(", compute;dur=", t.compute_ms);
  add(", total;dur=", t.total_ms);
  return out;
}

std::string server_timing(const serving::PhaseTimes& t, const engine::ModelOutput& out) {
  std::string timing = server_timing(t);
  if (out.first_token_ms() < 0) return timing;
  char buf[96];
  std::snprintf(buf, sizeof(buf), ", prefill;dur=%.3f, decode;dur=%.3f", out.first_token_ms(),
                std::max(0.0, out.last_token_ms() - out.first_token_ms()));
  return timing + buf;
}

// A LoRA adapter's name in the path answers for the adapter: its base model's metadata and readiness under the
// adapter's name (KServe clients ask for both before they infer on the name).
Reply handle_model_metadata(const HandlerEnv& env, const std::string& model, const std::string& version) {
  if (std::optional<Reply> bad = check_model_version(model, version)) return *bad;
  const ResolvedModel resolved = resolve_model(env, model);
  StatusOr<serving::ModelMetadata> metadata = env.server.model_metadata(resolved.model);
  if (!metadata.ok()) return error_reply(ApiFamily::kKServe, metadata.status());
  metadata->name = model;
  return Reply{200, encode_model_metadata(*metadata)};
}

Reply handle_model_ready(const HandlerEnv& env, const std::string& model, const std::string& version) {
  if (std::optional<Reply> bad = check_model_version(model, version)) return *bad;
  const ResolvedModel resolved = resolve_model(env, model);
  StatusOr<serving::ModelStatus> status = env.server.model_status(resolved.model);
  if (!status.ok()) return error_reply(ApiFamily::kKServe, status.status());
  const bool ready = status->state == serving::ModelState::kReady && !env.shutting_down;
  nlohmann::ordered_json body;
  body["name"] = model;
  body["ready"] = ready;
  return Reply{ready ? 200 : 503, dump_json(body)};
}

Reply handle_kserve_infer(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  const ApiFamily family = ApiFamily::kKServe;
  if (std::optional<Reply> bad = check_model_version(context.model, context.version)) return *bad;
  std::optional<size_t> json_length;
  if (request.has_header(kInferenceHeader)) {
    StatusOr<size_t> length =
        parse_inference_header_length(request.get_header_value(kInferenceHeader), request.body.size());
    if (!length.ok()) return error_reply(family, length.status());
    json_length = *length;
  }
  StatusOr<KServeInferRequest> parsed = parse_kserve_infer(request.body, json_length, env.codec);
  if (!parsed.ok()) return error_reply(family, parsed.status());
  StatusOr<serving::RequestOptions> options = request_options(context, request, parsed->priority, parsed->timeout_ms);
  if (!options.ok()) return error_reply(family, options.status());

  // The URL may name a LoRA adapter (a CLIP image adapter): the request runs on its base model under it.
  const ResolvedModel resolved = resolve_model(env, context.model);
  serving::RequestSpec spec;
  spec.model = resolved.model;
  spec.inputs = std::move(parsed->inputs);
  spec.options = std::move(*options);
  spec.params = kserve_params(*parsed, resolved.adapter);
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
  if (!response.ok()) return error_reply(family, response.status());

  StatusOr<EncodedBody> encoded = encode_kserve_infer(context.model, *parsed, *response);
  if (!encoded.ok()) return error_reply(family, encoded.status());
  Reply reply{200, std::move(encoded->body), encoded->content_type};
  if (encoded->json_length) reply.headers.emplace_back(kInferenceHeader, std::to_string(*encoded->json_length));
  reply.headers.emplace_back("Server-Timing", server_timing(response->times));
  return reply;
}

Reply handle_repository_index(const HandlerEnv& env, const httplib::Request& request) {
  StatusOr<bool> ready_only = parse_repository_index(request.body);
  if (!ready_only.ok()) return error_reply(ApiFamily::kKServe, ready_only.status());
  return Reply{200, encode_repository_index(env.server.models(), *ready_only)};
}

Reply handle_repository_load(const HandlerEnv& env, const std::string& model, const httplib::Request& request,
                             bool load) {
  if (Status s = parse_repository_action(request.body); !s.ok()) return error_reply(ApiFamily::kKServe, s);
  const Status status = load ? env.server.load_model(model) : env.server.unload_model(model);
  if (!status.ok()) return error_reply(ApiFamily::kKServe, status);
  return Reply{200, "{}"};
}

}  // namespace mmserve::api
