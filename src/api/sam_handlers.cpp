// POST /v1/segment (see handlers.h and sam_codec.h): a SAM model's masks for one prompt on one image (or on the
// image_id of an earlier call, whose embedding the model's cache holds). Tests: tests/unit/api/http_server_test.cpp
// (through the fake server), tests/e2e/sam_server_test.cpp (a real SAM model against HF's goldens).
#include "api/handlers.h"
#include "api/sam_codec.h"

namespace mmserve::api {

Reply handle_segment(const HandlerEnv& env, RequestContext& context, const httplib::Request& request) {
  const ApiFamily family = ApiFamily::kOpenAi;
  StatusOr<SegmentRequest> parsed = parse_segment_request(request.body);
  if (!parsed.ok()) return error_reply(family, parsed.status());
  context.model = parsed->model;
  StatusOr<serving::RequestOptions> options = request_options(context, request, std::nullopt, std::nullopt);
  if (!options.ok()) return error_reply(family, options.status());

  serving::RequestSpec spec;
  spec.model = parsed->model;
  spec.inputs = std::move(parsed->inputs);
  spec.options = std::move(*options);
  spec.params = parsed->params;
  spec.cancelled = [peer = context.peer] { return peer != nullptr && peer->gone(); };
  StatusOr<serving::ResponseData> response = env.server.infer(std::move(spec));
  if (!response.ok()) {
    const bool unknown_model = response.status().code() == StatusCode::kNotFound;
    return error_reply(family, response.status(), unknown_model ? "model_not_found" : "");
  }
  const auto* sam = engine::output_as<engine::SamOutput>(response->output);
  if (sam == nullptr) {
    return error_reply(family, invalid_argument("model '" + parsed->model + "' is not a SAM (segmentation) model"));
  }
  Reply reply{200, encode_segment_response(*sam, parsed->format)};
  reply.headers.emplace_back("Server-Timing", server_timing(response->times));
  return reply;
}

}  // namespace mmserve::api
