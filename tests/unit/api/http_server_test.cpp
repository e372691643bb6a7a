// The HTTP server over real sockets against FakeInferenceServer: every route, both API shapes, every error
// code the api produces, auth, priority/timeout propagation, tracing headers, /metrics labels and the access
// log. Transport behaviour (slow clients, keep-alive, early refusals, disconnects) is in transport_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "api/base64.h"
#include "api/trace_context.h"
#include "test_server.h"

namespace mmserve::api::testing {
namespace {

using nlohmann::json;

const char* kJson = "application/json";

json text_infer(std::vector<std::string> texts) {
  return {{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {texts.size()}}, {"data", texts}}}}};
}

void expect_kserve_error(const httplib::Result& r, int status, const std::string& needle = "") {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  ASSERT_TRUE(body["error"].is_string()) << r->body;
  EXPECT_NE(body["error"].get<std::string>().find(needle), std::string::npos) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  EXPECT_TRUE(parse_traceparent(r->get_header_value("traceparent")).has_value());
}

void expect_openai_error(const httplib::Result& r, int status, const std::string& type,
                         const std::string& needle = "") {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body["error"].is_object()) << r->body;
  EXPECT_EQ(body["error"]["type"], type) << r->body;
  EXPECT_TRUE(body["error"].contains("param") && body["error"].contains("code")) << r->body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
}

TEST(HttpServer, ServerMetadataAndHealth) {
  TestServer s;
  httplib::Client c = s.client();
  auto r = c.Get("/v2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["name"], "mmserve");
  EXPECT_EQ(json::parse(r->body)["extensions"], json({"model_repository", "binary_tensor_data", "generate"}));
  r = c.Get("/v2/health/live");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["live"], true);
  r = c.Get("/v2/health/ready");
  EXPECT_EQ(r->status, 200);
  r = c.Get("/healthz");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  s.fake.ready_flag = false;
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 503);
  EXPECT_EQ(json::parse(c.Get("/v2/health/ready")->body)["ready"], false);
  EXPECT_EQ(c.Get("/healthz")->status, 503);
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
}

TEST(HttpServer, ModelMetadataAndReadiness) {
  TestServer s;
  httplib::Client c = s.client();
  auto r = c.Get("/v2/models/clip");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json meta = json::parse(r->body);
  EXPECT_EQ(meta["name"], "clip");
  EXPECT_EQ(meta["platform"], "mmserve_clip");
  EXPECT_EQ(meta["inputs"].size(), 3u);
  EXPECT_EQ(c.Get("/v2/models/clip/versions/1")->status, 200);
  expect_kserve_error(c.Get("/v2/models/clip/versions/2"), 404, "no version");
  expect_kserve_error(c.Get("/v2/models/nope"), 404, "nope");
  EXPECT_EQ(c.Get("/v2/models/clip/ready")->status, 200);
  EXPECT_EQ(json::parse(c.Get("/v2/models/clip/ready")->body)["ready"], true);
  EXPECT_EQ(c.Get("/v2/models/loading-clip/ready")->status, 503);
  EXPECT_EQ(c.Get("/v2/models/clip/versions/1/ready")->status, 200);
  expect_kserve_error(c.Get("/v2/models/nope/ready"), 404);
}

TEST(HttpServer, KServeInferJson) {
  TestServer s;
  httplib::Client c = s.client();
  json body = {{"id", "r1"},
               {"inputs",
                {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {"a cat", "a dog"}}},
                 {{"name", "image"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {base64_encode("IMAGEBYTES")}}}}}};
  auto r = c.Post("/v2/models/clip/infer", body.dump(), kJson);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json out = json::parse(r->body);
  EXPECT_EQ(out["model_name"], "clip");
  EXPECT_EQ(out["id"], "r1");
  ASSERT_EQ(out["outputs"].size(), 3u);
  EXPECT_EQ(out["outputs"][0]["name"], "text_embeds");
  EXPECT_EQ(out["outputs"][0]["shape"], json({2, FakeInferenceServer::kDim}));
  // The fake's embedding = [input index, kind, size, 0.5]: texts were inputs 0 and 1.
  EXPECT_EQ(out["outputs"][0]["data"][4], 1.0);
  EXPECT_EQ(out["outputs"][1]["name"], "image_embeds");
  EXPECT_EQ(out["outputs"][1]["data"][2], 10.0);  // size of "IMAGEBYTES"
  EXPECT_EQ(out["outputs"][2]["shape"], json({1, 2}));
  EXPECT_EQ(s.fake.last_images, std::vector<std::string>{"IMAGEBYTES"});
  EXPECT_EQ(s.fake.last_texts, (std::vector<std::string>{"a cat", "a dog"}));
  EXPECT_TRUE(
      std::regex_match(r->get_header_value("Server-Timing"),
                       std::regex(R"(queue;dur=1\.000, preprocess;dur=2\.000, compute;dur=3\.000, total;dur=6\.500)")))
      << r->get_header_value("Server-Timing");
  EXPECT_TRUE(parse_traceparent(r->get_header_value("traceparent")).has_value());
  // Versioned route, charset parameter on the Content-Type.
  r = c.Post("/v2/models/clip/versions/1/infer", text_infer({"x"}).dump(), "application/json; charset=utf-8");
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST(HttpServer, KServeInferBinaryExtension) {
  TestServer s;
  httplib::Client c = s.client();
  std::string texts;
  for (const std::string t : {"hello", "binary"}) {
    const uint32_t n = static_cast<uint32_t>(t.size());
    texts.append(reinterpret_cast<const char*>(&n), 4);
    texts += t;
  }
  const json header = {{"inputs",
                        {{{"name", "text"},
                          {"datatype", "BYTES"},
                          {"shape", {2}},
                          {"parameters", {{"binary_data_size", texts.size()}}}}}},
                       {"outputs", {{{"name", "text_embeds"}, {"parameters", {{"binary_data", true}}}}}}};
  const std::string json_text = header.dump();
  httplib::Headers headers = {{"Inference-Header-Content-Length", std::to_string(json_text.size())}};
  auto r = c.Post("/v2/models/clip/infer", headers, json_text + texts, "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.fake.last_texts, (std::vector<std::string>{"hello", "binary"}));
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/octet-stream");
  const size_t length = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
  const json out = json::parse(r->body.substr(0, length));
  EXPECT_EQ(out["outputs"][0]["parameters"]["binary_data_size"], 2 * FakeInferenceServer::kDim * 4);
  ASSERT_EQ(r->body.size(), length + 2 * FakeInferenceServer::kDim * 4);
  float second[FakeInferenceServer::kDim];
  std::memcpy(second, r->body.data() + length + FakeInferenceServer::kDim * 4, sizeof(second));
  EXPECT_EQ(second[0], 1.f);
  EXPECT_EQ(second[2], 6.f);  // "binary"
  // octet-stream without the header is not a body this route reads
  expect_kserve_error(c.Post("/v2/models/clip/infer", json_text + texts, "application/octet-stream"), 415);
  // a broken section is a 400 naming the problem
  headers = {{"Inference-Header-Content-Length", std::to_string(json_text.size())}};
  expect_kserve_error(
      c.Post("/v2/models/clip/infer", headers, json_text + texts.substr(0, 7), "application/octet-stream"), 400,
      "runs past the end");
  headers = {{"Inference-Header-Content-Length", "999999"}};
  expect_kserve_error(c.Post("/v2/models/clip/infer", headers, json_text + texts, "application/octet-stream"), 400,
                      "exceeds the body size");
}

TEST(HttpServer, TraceparentIsPropagatedOrGenerated) {
  TestServer s;
  httplib::Client c = s.client();
  const std::string incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  auto r = c.Get("/v2/health/live", {{"traceparent", incoming}});
  auto back = parse_traceparent(r->get_header_value("traceparent"));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_NE(back->parent_id, "00f067aa0ba902b7");
  r = c.Get("/v2/health/live", {{"traceparent", "00-bogus"}});
  back = parse_traceparent(r->get_header_value("traceparent"));
  ASSERT_TRUE(back.has_value());
  EXPECT_NE(back->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  // on errors too, including routes that do not exist
  EXPECT_TRUE(parse_traceparent(c.Get("/nope")->get_header_value("traceparent")).has_value());
  EXPECT_EQ(parse_traceparent(c.Get("/nope", {{"traceparent", incoming}})->get_header_value("traceparent"))->trace_id,
            "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(HttpServer, ValidationErrorsInBothShapes) {
  TestServer s;
  httplib::Client c = s.client();
  expect_kserve_error(c.Post("/v2/models/clip/infer", "{not json", kJson), 400, "malformed JSON");
  expect_kserve_error(c.Post("/v2/models/clip/infer", "{\"inputs\": []}", kJson), 400, "non-empty array");
  expect_kserve_error(c.Post("/v2/models/clip/infer", text_infer({"x"}).dump(), "text/plain"), 415, "Content-Type");
  expect_kserve_error(c.Post("/v2/models/clip/infer", text_infer({"x"}).dump(), "application/x-www-form-urlencoded"),
                      415);
  expect_openai_error(c.Post("/v1/embeddings", "{not json", kJson), 400, "invalid_request_error", "malformed JSON");
  expect_openai_error(c.Post("/v1/embeddings", R"({"model": "clip", "input": []})", kJson), 400,
                      "invalid_request_error", "empty array");
  expect_openai_error(c.Post("/v1/embeddings", R"({"model": "clip", "input": "x"})", "text/plain"), 415,
                      "invalid_request_error");
  expect_openai_error(c.Post("/v1/embeddings", R"({"model": "clip", "input": "https://e.com/a.png"})", kJson), 400,
                      "invalid_request_error", "URL fetches are disabled");
  EXPECT_EQ(s.fake.infer_calls.load(), 0);  // nothing invalid reached the server
  // unknown routes and methods
  expect_kserve_error(c.Get("/v3/nothing"), 404, "no route");
  expect_openai_error(c.Get("/v1/nothing"), 404, "invalid_request_error");
  auto r = c.Get("/v2/models/clip/infer");
  expect_kserve_error(r, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  expect_kserve_error(c.Delete("/v2/models/clip"), 405);
  // unknown models
  expect_kserve_error(c.Post("/v2/models/nope/infer", text_infer({"x"}).dump(), kJson), 404, "nope");
  r = c.Post("/v1/embeddings", R"({"model": "nope", "input": "x"})", kJson);
  expect_openai_error(r, 404, "invalid_request_error");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  // a model that is not ready
  expect_kserve_error(c.Post("/v2/models/loading-clip/infer", text_infer({"x"}).dump(), kJson), 503, "not ready");
}

TEST(HttpServer, ServerErrorsMapToTheirCodes) {
  TestServer s;
  httplib::Client c = s.client();
  const std::string body = text_infer({"x"}).dump();
  const std::vector<std::pair<Status, int>> cases = {
      {resource_exhausted("queue full"), 429},
      {Status(StatusCode::kUnavailable, "draining"), 503},
      {Status(StatusCode::kDeadlineExceeded, "deadline passed"), 504},
      {too_large("image of 100000000 pixels"), 413},
      {invalid_argument("cannot decode image"), 400},
      {failed_precondition("model is unloading"), 409},
      {internal_error("engine failed"), 500},
      {unimplemented("audio"), 501},
  };
  for (const auto& [status, code] : cases) {
    s.fake.set_error(status);
    auto r = c.Post("/v2/models/clip/infer", body, kJson);
    expect_kserve_error(r, code, status.message());
    if (code == 429) {
      EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    }
    auto o = c.Post("/v1/embeddings", R"({"model": "clip", "input": "x"})", kJson);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->status, code);
    EXPECT_EQ(json::parse(o->body)["error"]["message"], status.message());
    if (code == 429) {
      EXPECT_EQ(o->get_header_value("Retry-After"), "1");
      EXPECT_EQ(json::parse(o->body)["error"]["type"], "rate_limit_error");
    }
  }
}

TEST(HttpServer, HandlerExceptionsAre500AndTheServerLives) {
  TestServer s;
  s.fake.on_infer = [](const serving::RequestSpec& spec) {
    if (spec.inputs.size() == 2) throw std::runtime_error("kaboom");
  };
  httplib::Client c = s.client();
  expect_kserve_error(c.Post("/v2/models/clip/infer", text_infer({"a", "b"}).dump(), kJson), 500, "kaboom");
  EXPECT_EQ(c.Post("/v2/models/clip/infer", text_infer({"a"}).dump(), kJson)->status, 200);
}

TEST(HttpServer, PriorityTimeoutAndTenantReachTheServer) {
  TestServer s;
  httplib::Client c = s.client();
  const auto before = serving::Clock::now();
  auto r = c.Post("/v2/models/clip/infer", {{"x-mmserve-priority", "3"}, {"x-mmserve-timeout-ms", "200"}},
                  text_infer({"x"}).dump(), kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.fake.last_options.priority, 3);
  ASSERT_TRUE(s.fake.last_options.deadline.has_value());
  const double ms = std::chrono::duration<double, std::milli>(*s.fake.last_options.deadline - before).count();
  EXPECT_GT(ms, 150);
  EXPECT_LT(ms, 1200);
  EXPECT_EQ(s.fake.last_options.tenant, "default");
  EXPECT_EQ(s.fake.last_options.trace_id.size(), 32u);
  // request parameters override the headers
  json body = text_infer({"x"});
  body["parameters"] = {{"priority", 1}, {"timeout_ms", 5000}};
  r = c.Post("/v2/models/clip/infer", {{"x-mmserve-priority", "3"}, {"x-mmserve-timeout-ms", "200"}}, body.dump(),
             kJson);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(s.fake.last_options.priority, 1);
  const double long_ms = std::chrono::duration<double, std::milli>(*s.fake.last_options.deadline - before).count();
  EXPECT_GT(long_ms, 4000);
  // no header: default priority, no deadline
  c.Post("/v1/embeddings", R"({"model": "clip", "input": "x"})", kJson);
  EXPECT_EQ(s.fake.last_options.priority, 0);
  EXPECT_FALSE(s.fake.last_options.deadline.has_value());
  c.Post("/v1/embeddings", {{"x-mmserve-priority", "2"}}, R"({"model": "clip", "input": "x"})", kJson);
  EXPECT_EQ(s.fake.last_options.priority, 2);
  // malformed values are 400s
  const int calls = s.fake.infer_calls.load();
  expect_kserve_error(
      c.Post("/v2/models/clip/infer", {{"x-mmserve-priority", "high"}}, text_infer({"x"}).dump(), kJson), 400,
      "x-mmserve-priority");
  expect_kserve_error(
      c.Post("/v2/models/clip/infer", {{"x-mmserve-timeout-ms", "-1"}}, text_infer({"x"}).dump(), kJson), 400,
      "x-mmserve-timeout-ms");
  expect_openai_error(
      c.Post("/v1/embeddings", {{"x-mmserve-priority", "0"}}, R"({"model": "clip", "input": "x"})", kJson), 400,
      "invalid_request_error", "x-mmserve-priority");
  EXPECT_EQ(s.fake.infer_calls.load(), calls);
}

TEST(HttpServer, OpenAiEmbeddings) {
  TestServer s;
  httplib::Client c = s.client();
  auto r = c.Post("/v1/embeddings", R"({"model": "clip", "input": "a cat"})", kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  json out = json::parse(r->body);
  EXPECT_EQ(out["object"], "list");
  EXPECT_EQ(out["model"], "clip");
  ASSERT_EQ(out["data"].size(), 1u);
  EXPECT_EQ(out["data"][0]["embedding"].size(), static_cast<size_t>(FakeInferenceServer::kDim));
  EXPECT_EQ(out["usage"]["prompt_tokens"], 7);  // the fake counts len + 2
  EXPECT_EQ(out["usage"]["total_tokens"], 7);
  EXPECT_FALSE(r->get_header_value("Server-Timing").empty());

  const json mixed = {{"model", "clip"},
                      {"input", {"text one", "data:image/png;base64," + base64_encode("PNGDATA")}},
                      {"encoding_format", "base64"}};
  r = c.Post("/v1/embeddings", mixed.dump(), kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  out = json::parse(r->body);
  EXPECT_EQ(s.fake.last_images, std::vector<std::string>{"PNGDATA"});
  StatusOr<std::string> raw = base64_decode(out["data"][1]["embedding"].get<std::string>());
  ASSERT_TRUE(raw.ok());
  float e[FakeInferenceServer::kDim];
  ASSERT_EQ(raw->size(), sizeof(e));
  std::memcpy(e, raw->data(), sizeof(e));
  EXPECT_EQ(e[0], 1.f);  // input index 1
  EXPECT_EQ(e[1], 1.f);  // an image
  EXPECT_EQ(e[2], 7.f);  // 7 bytes

  r = c.Get("/v1/models");
  ASSERT_EQ(r->status, 200);
  out = json::parse(r->body);
  ASSERT_EQ(out["data"].size(), 1u);  // only the READY model
  EXPECT_EQ(out["data"][0]["id"], "clip");
  EXPECT_EQ(out["data"][0]["owned_by"], "mmserve");
}

TEST(HttpServer, ModelRepository) {
  TestServer s;
  httplib::Client c = s.client();
  auto r = c.Post("/v2/repository/index", "", kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  json index = json::parse(r->body);
  ASSERT_EQ(index.size(), 2u);
  EXPECT_EQ(index[0]["name"], "clip");
  EXPECT_EQ(index[0]["state"], "READY");
  EXPECT_EQ(index[1]["state"], "LOADING");
  EXPECT_EQ(json::parse(c.Post("/v2/repository/index", R"({"ready": true})", kJson)->body).size(), 1u);
  expect_kserve_error(c.Post("/v2/repository/index", R"({"ready": "yes"})", kJson), 400);
  r = c.Post("/v2/repository/models/clip/unload", "", kJson);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{}");
  EXPECT_EQ(c.Get("/v2/models/clip/ready")->status, 503);
  EXPECT_EQ(c.Post("/v2/repository/models/clip/load", "{}", kJson)->status, 200);
  EXPECT_EQ(c.Get("/v2/models/clip/ready")->status, 200);
  expect_kserve_error(c.Post("/v2/repository/models/nope/load", "", kJson), 404);
  expect_kserve_error(c.Post("/v2/repository/models/a..b/load", "", kJson), 400);
  expect_kserve_error(c.Post("/v2/repository/models/%2E%2E/load", "", kJson), 400);
  expect_kserve_error(c.Post("/v2/repository/models/clip/load", "[1]", kJson), 400);
}

TEST(HttpServer, ApiKeysAndTenants) {
  HttpServerOptions options;
  ASSERT_TRUE(options.keys.add("sk-default").ok());
  ASSERT_TRUE(options.keys.add("sk-team", "team-a").ok());
  TestServer s(std::move(options));
  httplib::Client c = s.client();
  // health routes are open
  EXPECT_EQ(c.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(c.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  // everything else needs a key
  auto r = c.Get("/v2");
  expect_kserve_error(r, 401, "missing API key");
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  expect_kserve_error(c.Get("/metrics"), 401);
  expect_kserve_error(
      c.Post("/v2/models/clip/infer", {{"Authorization", "Bearer wrong"}}, text_infer({"x"}).dump(), kJson), 401,
      "invalid API key");
  expect_openai_error(c.Post("/v1/embeddings", R"({"model": "clip", "input": "x"})", kJson), 401,
                      "authentication_error");
  expect_openai_error(c.Get("/v1/models", {{"Authorization", "Basic abc"}}), 401, "authentication_error");
  EXPECT_EQ(s.fake.infer_calls.load(), 0);
  // valid keys carry their tenant
  r = c.Post("/v2/models/clip/infer", {{"Authorization", "Bearer sk-team"}}, text_infer({"x"}).dump(), kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.fake.last_options.tenant, "team-a");
  r = c.Post("/v1/embeddings", {{"Authorization", "bearer sk-default"}}, R"({"model": "clip", "input": "x"})", kJson);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(s.fake.last_options.tenant, "default");
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer sk-default"}})->status, 200);
}

TEST(HttpServer, MetricsUseRouteTemplates) {
  TestServer s;
  httplib::Client c = s.client();
  ASSERT_EQ(c.Post("/v2/models/clip/infer", text_infer({"x"}).dump(), kJson)->status, 200);
  c.Post("/v2/models/zzz-unique-name/infer", text_infer({"x"}).dump(), kJson);
  c.Get("/some/random/path-qqq");
  // A request is counted after its response is written, and an error response may close the connection, so
  // the three requests can be counted in any order after the client saw them: poll until all three are.
  const std::vector<std::string> counted = {
      R"(http_requests_total{method="POST",route="/v2/models/{model}/infer",code="200"} 1)",
      R"(http_requests_total{method="POST",route="/v2/models/{model}/infer",code="404"} 1)",
      R"(http_requests_total{method="GET",route="unmatched",code="404"} 1)"};
  auto all_counted = [&](const std::string& body) {
    for (const std::string& line : counted) {
      if (body.find(line) == std::string::npos) return false;
    }
    return true;
  };
  auto r = c.Get("/metrics");
  for (int i = 0; i < 500 && r && !all_counted(r->body); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = c.Get("/metrics");
  }
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = r->body;
  EXPECT_NE(text.find("# TYPE http_requests_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE http_request_duration_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find(R"(http_requests_total{method="POST",route="/v2/models/{model}/infer",code="200"} 1)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(http_requests_total{method="POST",route="/v2/models/{model}/infer",code="404"} 1)"),
            std::string::npos);
  EXPECT_NE(text.find(R"(http_requests_total{method="GET",route="unmatched",code="404"} 1)"), std::string::npos);
  EXPECT_NE(text.find(R"(http_request_duration_seconds_count{method="POST",route="/v2/models/{model}/infer"} 2)"),
            std::string::npos);
  EXPECT_EQ(text.find("zzz-unique-name"), std::string::npos);
  EXPECT_EQ(text.find("path-qqq"), std::string::npos);
}

TEST(HttpServer, AccessLogHasOneJsonLinePerRequest) {
  TestServer s;
  httplib::Client c = s.client();
  const std::string trace = "0af7651916cd43dd8448eb211c80319c";
  ASSERT_EQ(c.Post("/v2/models/clip/infer",
                   {{"traceparent", "00-" + trace + "-b7ad6b7169203331-01"}, {"x-mmserve-priority", "2"}},
                   text_infer({"x"}).dump(), kJson)
                ->status,
            200);
  c.Get("/v2/health/live");
  s.stop();  // every line is written
  std::istringstream lines(s.access_log());
  std::string line;
  std::vector<json> entries;
  while (std::getline(lines, line)) {
    const json entry = json::parse(line, nullptr, false);
    ASSERT_FALSE(entry.is_discarded()) << line;
    entries.push_back(entry);
  }
  ASSERT_EQ(entries.size(), 2u);
  // Lines are written after each response, so their order across requests is not guaranteed.
  if (entries[0]["path"] != "/v2/models/clip/infer") std::swap(entries[0], entries[1]);
  const json& e = entries[0];
  for (const char* key :
       {"ts", "method", "path", "status", "duration_ms", "bytes", "model", "trace_id", "tenant", "priority"}) {
    EXPECT_TRUE(e.contains(key)) << key;
  }
  EXPECT_EQ(e["method"], "POST");
  EXPECT_EQ(e["path"], "/v2/models/clip/infer");
  EXPECT_EQ(e["route"], "/v2/models/{model}/infer");
  EXPECT_EQ(e["status"], 200);
  EXPECT_EQ(e["model"], "clip");
  EXPECT_EQ(e["trace_id"], trace);
  EXPECT_EQ(e["tenant"], "default");
  EXPECT_EQ(e["priority"], 2);
  EXPECT_GT(e["bytes"].get<int>(), 0);
  EXPECT_GE(e["duration_ms"].get<double>(), 0.0);
  EXPECT_EQ(entries[1]["path"], "/v2/health/live");
}

TEST(HttpServer, OversizeBodiesAre413InTheRightShape) {
  HttpServerOptions options;
  options.transport.body_bytes_max = 1024;
  TestServer s(std::move(options));
  httplib::Client c = s.client();
  const std::string big = text_infer({std::string(2000, 'x')}).dump();
  expect_kserve_error(c.Post("/v2/models/clip/infer", big, kJson), 413, "1024 bytes");
  const json openai = {{"model", "clip"}, {"input", std::string(2000, 'x')}};
  expect_openai_error(c.Post("/v1/embeddings", openai.dump(), kJson), 413, "invalid_request_error", "--max-body-mb");
  EXPECT_EQ(s.fake.infer_calls.load(), 0);
  EXPECT_EQ(c.Post("/v2/models/clip/infer", text_infer({"small"}).dump(), kJson)->status, 200);
}

TEST(HttpServer, DrainingAnswers503) {
  TestServer s;
  httplib::Client c = s.client();
  s.fake.draining = true;
  expect_kserve_error(c.Post("/v2/models/clip/infer", text_infer({"x"}).dump(), kJson), 503, "draining");
}

}  // namespace
}  // namespace mmserve::api::testing
