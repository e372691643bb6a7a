// The OpenAI audio routes over real HTTP against FakeInferenceServer (its "whisper" model turns "a|b" into
// the segments " a", " b"): multipart/form-data handled by cpp-httplib and checked by openai_audio_codec, every
// response_format through engine::format_transcript, stream=true as server-sent events, and every broken
// request (missing fields, wrong Content-Type, malformed multipart bodies, word timestamps, non-audio bytes, a
// CLIP model asked to transcribe) answered 4xx in OpenAI's error shape with the server still serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "test_server.h"

namespace mmserve::api::testing {
namespace {

using nlohmann::json;

const std::string kBoundary = "----mmserve-test-boundary-7MA4YWxkTrZu0gW";

struct Part {
  std::string name;
  std::string content;
  std::string filename;  // non-empty: a file part
};

std::string multipart_body(const std::vector<Part>& parts, const std::string& boundary = kBoundary) {
  std::string body;
  for (const Part& p : parts) {
    body += "--" + boundary + "\r\n";
    body += "Content-Disposition: form-data; name=\"" + p.name + "\"";
    if (!p.filename.empty()) body += "; filename=\"" + p.filename + "\"\r\nContent-Type: audio/wav";
    body += "\r\n\r\n" + p.content + "\r\n";
  }
  return body + "--" + boundary + "--\r\n";
}

const std::string kMultipart = "multipart/form-data; boundary=" + kBoundary;

httplib::Result post_form(httplib::Client& c, const std::string& path, const std::vector<Part>& parts) {
  return c.Post(path.c_str(), multipart_body(parts), kMultipart.c_str());
}

std::vector<Part> form(const std::string& audio, std::vector<Part> extra = {}, const std::string& model = "whisper") {
  std::vector<Part> parts = {{"file", audio, "speech.wav"}, {"model", model, ""}};
  parts.insert(parts.end(), extra.begin(), extra.end());
  return parts;
}

void expect_openai_error(const httplib::Result& r, int status, const std::string& needle) {
  ASSERT_TRUE(r) << "no response";
  EXPECT_EQ(r->status, status) << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body["error"].is_object()) << r->body;
  EXPECT_TRUE(body["error"].contains("type") && body["error"].contains("code")) << r->body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(needle), std::string::npos) << r->body;
}

// The events of an SSE body: the JSON after each "data: ".
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    out.push_back(json::parse(body.substr(pos + 6, end - pos - 6), nullptr, false));
    pos = end == std::string::npos ? body.size() : end;
  }
  return out;
}

class AudioHttp : public ::testing::Test {
 protected:
  AudioHttp() { server.fake.add_model("whisper"); }
  TestServer server;
};

TEST_F(AudioHttp, TranscriptionJsonIsTheExecutorsFormat) {
  httplib::Client c = server.client();
  auto r = post_form(c, "/v1/audio/transcriptions", form("hello|world", {{"language", "de", ""}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  EXPECT_EQ(json::parse(r->body)["text"], " hello world");
  EXPECT_FALSE(r->get_header_value("Server-Timing").empty());
  EXPECT_EQ(server.fake.last_transcribe.task, engine::WhisperTask::kTranscribe);
  EXPECT_EQ(server.fake.last_transcribe.language, "de");
}

TEST_F(AudioHttp, EveryResponseFormat) {
  httplib::Client c = server.client();
  for (const char* name : {"json", "text", "srt", "vtt", "verbose_json"}) {
    SCOPED_TRACE(name);
    auto r = post_form(c, "/v1/audio/transcriptions", form("one|two", {{"response_format", name, ""}}));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    StatusOr<engine::TranscriptFormat> format = engine::parse_transcript_format(name);
    ASSERT_TRUE(format.ok());
    EXPECT_EQ(r->get_header_value("Content-Type"), engine::transcript_content_type(*format));
    // The body is the engine's formatting of the transcript the fake made (its own tests check the formats).
    engine::Transcript t;
    t.text = " one two";
    t.language = "en";
    t.duration = 2;
    for (int i = 0; i < 2; ++i) {
      engine::TranscriptSegment s;
      s.id = i;
      s.start = i;
      s.end = i + 1;
      s.text = i == 0 ? " one" : " two";
      s.tokens = {50364 + i};
      t.segments.push_back(s);
    }
    EXPECT_EQ(r->body, engine::format_transcript(t, *format, engine::WhisperTask::kTranscribe));
  }
}

TEST_F(AudioHttp, TranslationIsTheTranslateTask) {
  httplib::Client c = server.client();
  auto r = post_form(c, "/v1/audio/translations", form("bonjour", {{"prompt", "Hi.", ""}, {"temperature", "0.4", ""}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["text"], " bonjour");
  EXPECT_EQ(server.fake.last_transcribe.task, engine::WhisperTask::kTranslate);
  EXPECT_EQ(server.fake.last_transcribe.initial_prompt, "Hi.");
  ASSERT_EQ(server.fake.last_transcribe.temperatures.size(), 4u);  // 0.4, 0.6, 0.8, 1.0
  EXPECT_NEAR(server.fake.last_transcribe.temperatures[0], 0.4f, 1e-6);
  EXPECT_NEAR(server.fake.last_transcribe.temperatures[3], 1.0f, 1e-6);
  // Translations have no language or stream fields (OpenAI's API).
  expect_openai_error(post_form(c, "/v1/audio/translations", form("x", {{"language", "fr", ""}})), 400,
                      "Unrecognized request argument supplied: language");
  expect_openai_error(post_form(c, "/v1/audio/translations", form("x", {{"stream", "true", ""}})), 400,
                      "Unrecognized request argument supplied: stream");
}

TEST_F(AudioHttp, StreamIsOneDeltaPerSegmentThenDone) {
  httplib::Client c = server.client();
  auto r = post_form(c, "/v1/audio/transcriptions", form("a|bb|ccc", {{"stream", "true", ""}}));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  const std::vector<json> events = sse_events(r->body);
  ASSERT_EQ(events.size(), 4u) << r->body;
  const char* deltas[] = {" a", " bb", " ccc"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i]["type"], "transcript.text.delta");
    EXPECT_EQ(events[i]["delta"], deltas[i]);
  }
  EXPECT_EQ(events[3]["type"], "transcript.text.done");
  EXPECT_EQ(events[3]["text"], " a bb ccc");
  EXPECT_EQ(events[3]["usage"]["type"], "duration");
  // An error before the first event is an ordinary JSON error with its status.
  expect_openai_error(post_form(c, "/v1/audio/transcriptions", form("NOTAUDIO", {{"stream", "true", ""}})), 400,
                      "not an audio file");
}

TEST_F(AudioHttp, BadFieldsAre400InOpenAisShape) {
  httplib::Client c = server.client();
  const std::string path = "/v1/audio/transcriptions";
  expect_openai_error(post_form(c, path, {{"model", "whisper", ""}}), 400, "'file' is required");
  expect_openai_error(post_form(c, path, {{"file", "x", "a.wav"}}), 400, "'model' is required");
  expect_openai_error(post_form(c, path, form("")), 400, "'file' is empty");
  expect_openai_error(post_form(c, path, form("x", {{"response_format", "mp3", ""}})), 400, "response_format");
  expect_openai_error(post_form(c, path, form("x", {{"timestamp_granularities[]", "word", ""}})), 400,
                      "word timestamps are not supported");
  expect_openai_error(post_form(c, path, form("x", {{"temperature", "1.5", ""}})), 400, "temperature");
  expect_openai_error(post_form(c, path, form("x", {{"stream", "maybe", ""}})), 400, "stream");
  expect_openai_error(post_form(c, path, form("x", {{"voice", "alloy", ""}})), 400,
                      "Unrecognized request argument supplied: voice");
  expect_openai_error(post_form(c, path, form("x", {{"model", "whisper", ""}})), 400, "given twice");
  expect_openai_error(post_form(c, path, form("NOTAUDIO\x01\x02")), 400, "not an audio file");
  // segment granularity is what Whisper gives: accepted.
  auto ok = post_form(c, path, form("x", {{"timestamp_granularities[]", "segment", ""}}));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(AudioHttp, UnknownAndClipModels) {
  httplib::Client c = server.client();
  auto r = post_form(c, "/v1/audio/transcriptions", form("x", {}, "nope"));
  expect_openai_error(r, 404, "nope");
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "model_not_found");
  expect_openai_error(post_form(c, "/v1/audio/transcriptions", form("x", {}, "clip")), 400, "CLIP model");
}

TEST_F(AudioHttp, WrongContentTypeIs415) {
  httplib::Client c = server.client();
  expect_openai_error(c.Post("/v1/audio/transcriptions", R"({"model":"whisper"})", "application/json"), 415,
                      "multipart/form-data");
  expect_openai_error(c.Post("/v1/audio/transcriptions", "RIFF....", "audio/wav"), 415, "multipart/form-data");
  // ... and multipart is refused where JSON is expected.
  auto r = c.Post("/v1/embeddings", multipart_body(form("x")), kMultipart.c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
}

TEST_F(AudioHttp, MalformedMultipartBodiesAre400AndTheServerLives) {
  httplib::Client c = server.client();
  const std::string path = "/v1/audio/transcriptions";
  const std::string good = multipart_body(form("x"));
  struct Case {
    const char* what;
    std::string body;
    std::string content_type;
  };
  const std::vector<Case> cases = {
      {"no boundary parameter", good, "multipart/form-data"},
      {"another boundary", good, "multipart/form-data; boundary=not-the-one"},
      {"no closing boundary", good.substr(0, good.rfind("--" + kBoundary + "--")), kMultipart},
      {"cut in a part header", good.substr(0, 60), kMultipart},
      {"garbage", std::string(300, '\x07'), kMultipart},
      {"part without a name",
       "--" + kBoundary + "\r\nContent-Disposition: form-data\r\n\r\nx\r\n--" + kBoundary + "--\r\n", kMultipart},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto r = c.Post(path.c_str(), k.body, k.content_type.c_str());
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, 400) << r->body;
    const json body = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body["error"].is_object()) << r->body;
  }
  auto r = post_form(c, path, form("still|alive"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace mmserve::api::testing
