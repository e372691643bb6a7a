// The routes of docs/api.md as data: method, path template, API family (error shape), whether it needs an
// API key and whether it takes a body, and the matcher that maps a request to one of them.
//
// Matching is by path segments: a `{name}` segment matches any one non-empty segment and is captured (the model
// name, the version). The template string is what metrics and logs record, never the raw path, so the label
// set stays bounded however many paths clients send. HEAD matches GET routes. A path that exists under
// another method gives 405 with Allow. Tests: tests/unit/api/route_table_test.cpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/error_mapping.h"

namespace mmserve::api {

enum class RouteId {
  kServerMetadata,
  kHealthLive,
  kHealthReady,
  kModelMetadata,
  kModelVersionMetadata,
  kModelReady,
  kModelVersionReady,
  kModelInfer,
  kModelVersionInfer,
  kModelGenerate,
  kModelVersionGenerate,
  kModelGenerateStream,
  kModelVersionGenerateStream,
  kRepositoryIndex,
  kRepositoryLoad,
  kRepositoryUnload,
  kOpenAiModels,
  kOpenAiEmbeddings,
  kSegment,
  kOpenAiCompletions,
  kOpenAiChatCompletions,
  kOpenAiTranscriptions,
  kOpenAiTranslations,
  kMetrics,
  kHealthz,
  kDebugTopology,
  kLoadLoraAdapter,
  kUnloadLoraAdapter,
  kAdapters,
};

struct Route {
  RouteId id;
  const char* method;   // "GET" or "POST"
  const char* pattern;  // "/v2/models/{model}/infer"
  ApiFamily family;
  bool needs_key;  // when API keys are configured
  bool has_body;   // POST with a body (Content-Type checked: JSON, or multipart/form-data for the audio routes)
};

// Every route, in docs/api.md order.
const std::vector<Route>& routes();

struct RouteMatch {
  const Route* route = nullptr;  // nullptr: no route for this method and path
  std::string model;             // the {model} segment, if any
  std::string version;           // the {version} segment, if any
  std::string allow;             // when route is nullptr but the path exists: "GET" or "POST" (405)
};

RouteMatch match_route(std::string_view method, std::string_view path);

// The family of a path for error bodies when no route matched: /v1/... is OpenAI, everything else KServe.
ApiFamily family_of_path(std::string_view path);

}  // namespace mmserve::api
