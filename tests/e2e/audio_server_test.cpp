// End-to-end tests of the speech routes of `mmserve serve`: the real binary serving a copy of the tiny Whisper
// fixture (tests/fixtures/whisper/whisper-tiny-mel80-f32, random weights, so its text is gibberish) beside the
// tiny CLIP fixture, driven with curl (multipart uploads, -N for the event stream) and httplib (KServe). Every
// transcript is compared with what the WhisperExecutor gives in this process for the same file and options,
// formatted by engine::format_transcript: OpenAI's five response formats, translations, stream=true events,
// KServe audio in JSON (base64) and the binary extension. Then every broken request gets its 4xx in the
// family's error shape: missing fields, unknown or CLIP model, bad response_format, word timestamps, non-audio,
// truncated, zero-length, too long and unsupported-format files, a JSON body, a malformed multipart body; and
// the server still serves and counts the audio seconds in /metrics.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../conformance/golden.h"
#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"
#include "server_process.h"

namespace mmserve {
namespace {

using nlohmann::json;
using namespace e2e;
using testing::fixture;

constexpr const char* kWhisper = "whisper-tiny";
constexpr const char* kShort = "whisper-short";  // audio_seconds_max: 5 (jfk.wav is 11 s)
constexpr const char* kClip = "clip-tiny";

// Copies fixture `from` (without its goldens) into root/name, with `yaml` as its mmserve.yaml when not empty.
void copy_model(const fs::path& root, const std::string& from, const std::string& name, const std::string& yaml) {
  fs::create_directories(root / name);
  for (const auto& entry : fs::directory_iterator(fixture(from))) {
    if (entry.path().filename().string().rfind("golden", 0) == 0) continue;
    fs::copy_file(entry.path(), root / name / entry.path().filename());
  }
  if (!yaml.empty()) std::ofstream(root / name / "mmserve.yaml") << yaml;
}

fs::path make_audio_repository() {
  const fs::path root = fs::temp_directory_path() / ("mmserve_e2e_audio_" + std::to_string(::getpid()));
  fs::remove_all(root);
  copy_model(root, "whisper/whisper-tiny-mel80-f32", kWhisper, "max_batch_size: 4\n");
  copy_model(root, "whisper/whisper-tiny-mel80-f32", kShort, "audio_seconds_max: 5\n");
  copy_model(root, "clip-tiny-quickgelu-f32", kClip, "");
  return root;
}

// What the executor gives for the file with these options (the server must give exactly this).
engine::Transcript reference(const std::string& path, const engine::TranscribeOptions& options) {
  static std::unique_ptr<engine::WhisperExecutor> executor = [] {
    auto e = engine::WhisperExecutor::create(fixture("whisper/whisper-tiny-mel80-f32"), engine::ExecutorOptions{});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
  }();
  if (executor == nullptr) return {};
  auto audio = audio::decode_audio_file(path);
  EXPECT_TRUE(audio.ok()) << audio.status().to_string();
  auto t = executor->transcribe(audio->samples, options);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : engine::Transcript{};
}

const std::string kJfk = fixture("audio/jfk.wav");

class AudioServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    repository_ = new fs::path(make_audio_repository());
    server_ = new ServerProcess(*repository_, {"--max-body-mb", "4"});
    ASSERT_TRUE(server_->wait_ready(120s)) << server_->stderr_text();
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->terminate(), 0) << server_->stderr_text();
    }
    delete server_;
    server_ = nullptr;
    fs::remove_all(*repository_);
    delete repository_;
  }
  // curl -F for the OpenAI routes; `fields` are extra `-F` arguments.
  static CurlResult upload(const std::string& route, const std::string& file, const std::string& model,
                           const std::string& fields = "") {
    return curl("-F 'file=@" + file + "' -F 'model=" + model + "' " + fields + " " + server_->url() + route);
  }
  static fs::path scratch(const std::string& name, const std::string& bytes) {
    const fs::path p = *repository_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  static ServerProcess* server_;
  static fs::path* repository_;
};
ServerProcess* AudioServer::server_ = nullptr;
fs::path* AudioServer::repository_ = nullptr;

void expect_openai_error(const CurlResult& r, int status, const std::string& needle) {
  EXPECT_EQ(r.status, status) << r.body;
  const json body = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body["error"].is_object()) << r.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(needle), std::string::npos) << r.body;
}

TEST_F(AudioServer, EveryResponseFormatEqualsTheExecutor) {
  const engine::Transcript expected = reference(kJfk, engine::TranscribeOptions{});
  EXPECT_NEAR(expected.duration, 11.0, 1e-9);
  for (const char* name : {"json", "text", "srt", "vtt", "verbose_json"}) {
    SCOPED_TRACE(name);
    const CurlResult r = upload("/v1/audio/transcriptions", kJfk, kWhisper, std::string("-F response_format=") + name);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, engine::format_transcript(expected, *engine::parse_transcript_format(name),
                                                engine::WhisperTask::kTranscribe));
  }
  // Options reach the executor: language, prompt, temperature.
  engine::TranscribeOptions options;
  options.language = "de";
  options.initial_prompt = "Ich bin ein Berliner.";
  options.temperatures = {0.4f, 0.6f, 0.8f, 1.0f};
  const CurlResult r = upload("/v1/audio/transcriptions", kJfk, kWhisper,
                              "-F language=de -F 'prompt=Ich bin ein Berliner.' -F temperature=0.4 "
                              "-F response_format=verbose_json -F 'timestamp_granularities[]=segment'");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, engine::format_transcript(reference(kJfk, options), engine::TranscriptFormat::kVerboseJson,
                                              engine::WhisperTask::kTranscribe));
  EXPECT_EQ(json::parse(r.body)["language"], "german");
}

TEST_F(AudioServer, TranslationEqualsTheExecutor) {
  engine::TranscribeOptions options;
  options.task = engine::WhisperTask::kTranslate;
  const CurlResult r = upload("/v1/audio/translations", kJfk, kWhisper, "-F response_format=verbose_json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, engine::format_transcript(reference(kJfk, options), engine::TranscriptFormat::kVerboseJson,
                                              engine::WhisperTask::kTranslate));
  EXPECT_EQ(json::parse(r.body)["task"], "translate");
}

TEST_F(AudioServer, StreamedEventsAreTheSegments) {
  const engine::Transcript expected = reference(kJfk, engine::TranscribeOptions{});
  const CurlResult r = upload("/v1/audio/transcriptions", kJfk, kWhisper, "-N -F stream=true");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<json> events;
  for (size_t pos = 0; (pos = r.body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << r.body;
    events.push_back(json::parse(r.body.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  ASSERT_EQ(events.size(), expected.segments.size() + 1) << r.body;
  for (size_t i = 0; i < expected.segments.size(); ++i) {
    EXPECT_EQ(events[i]["type"], "transcript.text.delta");
    EXPECT_EQ(events[i]["delta"], expected.segments[i].text);
  }
  EXPECT_EQ(events.back()["type"], "transcript.text.done");
  EXPECT_EQ(events.back()["text"], expected.text);
}

TEST_F(AudioServer, KServeAudioJsonAndBinary) {
  engine::TranscribeOptions options;
  options.language = "en";
  options.timestamps = false;
  const engine::Transcript expected = reference(kJfk, options);
  const std::string wav = read_file(kJfk);
  httplib::Client c = server_->client();
  const json request = {
      {"parameters", {{"language", "en"}, {"timestamps", false}}},
      {"inputs", {{{"name", "audio"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {base64(wav)}}}}}};
  auto r = c.Post((std::string("/v2/models/") + kWhisper + "/infer").c_str(), request.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json out = json::parse(r->body);
  ASSERT_EQ(out["outputs"].size(), 3u);
  EXPECT_EQ(out["outputs"][0]["name"], "text");
  EXPECT_EQ(out["outputs"][0]["data"][0], expected.text);
  const json segments = json::parse(out["outputs"][1]["data"][0].get<std::string>());
  ASSERT_EQ(segments.size(), expected.segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    EXPECT_EQ(segments[i]["tokens"].get<std::vector<int32_t>>(), expected.segments[i].tokens);
  }
  EXPECT_EQ(out["outputs"][2]["data"][0], "en");

  // Binary extension both ways: the file's raw bytes in, the text's bytes out.
  const uint32_t n = static_cast<uint32_t>(wav.size());
  const std::string element = std::string(reinterpret_cast<const char*>(&n), 4) + wav;
  const json header = {{"parameters", {{"language", "en"}, {"timestamps", false}}},
                       {"inputs",
                        {{{"name", "audio"},
                          {"datatype", "BYTES"},
                          {"shape", {1}},
                          {"parameters", {{"binary_data_size", element.size()}}}}}},
                       {"outputs", {{{"name", "text"}, {"parameters", {{"binary_data", true}}}}}}};
  const std::string header_text = header.dump();
  httplib::Headers headers = {{"Inference-Header-Content-Length", std::to_string(header_text.size())}};
  r = c.Post((std::string("/v2/models/") + kWhisper + "/infer").c_str(), headers, header_text + element,
             "application/octet-stream");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const size_t length = std::stoul(r->get_header_value("Inference-Header-Content-Length"));
  out = json::parse(r->body.substr(0, length));
  ASSERT_EQ(out["outputs"].size(), 1u);
  EXPECT_EQ(r->body.substr(length + 4), expected.text);

  const json meta = json::parse(c.Get((std::string("/v2/models/") + kWhisper).c_str())->body);
  EXPECT_EQ(meta["platform"], "mmserve_whisper");
  EXPECT_EQ(meta["inputs"][0]["name"], "audio");

  // KServe errors: text to a speech model, audio to CLIP, not audio, too long.
  const json text = {{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {"hi"}}}}}};
  r = c.Post((std::string("/v2/models/") + kWhisper + "/infer").c_str(), text.dump(), "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(json::parse(r->body)["error"].is_string());
  r = c.Post((std::string("/v2/models/") + kClip + "/infer").c_str(), request.dump(), "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  const json junk = {
      {"inputs",
       {{{"name", "audio"}, {"datatype", "BYTES"}, {"shape", {1}}, {"data", {base64("definitely not audio")}}}}}};
  r = c.Post((std::string("/v2/models/") + kWhisper + "/infer").c_str(), junk.dump(), "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  r = c.Post((std::string("/v2/models/") + kShort + "/infer").c_str(), request.dump(), "application/json");
  EXPECT_EQ(r->status, 413) << r->body;
}

TEST_F(AudioServer, BrokenRequestsAre4xxAndTheServerLives) {
  const std::string u = server_->url();
  const std::string route = "/v1/audio/transcriptions";
  const std::string wav = read_file(kJfk);
  expect_openai_error(curl("-F model=whisper-tiny " + u + route), 400, "'file' is required");
  expect_openai_error(curl("-F 'file=@" + kJfk + "' " + u + route), 400, "'model' is required");
  CurlResult r = upload(route, kJfk, "no-such-model");
  expect_openai_error(r, 404, "no-such-model");
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
  expect_openai_error(upload(route, kJfk, kClip), 400, "CLIP model");
  expect_openai_error(upload(route, kJfk, kWhisper, "-F response_format=mp3"), 400, "response_format");
  expect_openai_error(upload(route, kJfk, kWhisper, "-F 'timestamp_granularities[]=word'"), 400,
                      "word timestamps are not supported");
  expect_openai_error(upload(route, scratch("notes.txt", "these are some notes, not audio").string(), kWhisper), 400,
                      "audio");
  expect_openai_error(upload(route, scratch("cut.wav", wav.substr(0, 30)).string(), kWhisper), 400, "audio");
  expect_openai_error(upload(route, scratch("empty.wav", "").string(), kWhisper), 400, "empty");
  // AIFF: a real audio container this server does not decode.
  expect_openai_error(upload(route,
                             scratch("x.aiff",
                                     "FORM\x00\x00\x10\x00"
                                     "AIFFCOMM" +
                                         std::string(64, '\x01'))
                                 .string(),
                             kWhisper),
                      400, "audio");
  expect_openai_error(upload(route, kJfk, kShort), 413, "audio");
  expect_openai_error(upload(route, kJfk, kShort, "-F stream=true"), 413, "audio");  // before any event
  expect_openai_error(curl("-H 'Content-Type: application/json' -d '{\"model\":\"whisper-tiny\"}' " + u + route), 415,
                      "multipart/form-data");
  expect_openai_error(curl("-H 'Content-Type: multipart/form-data; boundary=XyZ' --data-binary '--XyZ\r\nContent-"
                           "Disposition: form-data; name=\"model\"\r\n\r\nwhisper-tiny' " +
                           u + route),
                      400, "malformed multipart");
  // A body over --max-body-mb (4 MiB) is 413 before it is read.
  const fs::path big = scratch("big.wav", std::string(5 << 20, '\0'));
  expect_openai_error(upload(route, big.string(), kWhisper), 413, "");

  // A streaming client that hangs up after half a second (mid-transcription): the server carries on.
  const CurlResult gone = upload(route, kJfk, kWhisper, "-N --max-time 0.5 -F stream=true");
  EXPECT_NE(gone.status, 500) << gone.body;

  // Still serving, and the audio seconds are counted.
  r = upload("/v1/audio/translations", kJfk, kWhisper, "-F response_format=text");
  EXPECT_EQ(r.status, 200) << r.body;
  const std::string metrics = curl(u + "/metrics").body;
  EXPECT_NE(metrics.find("mmserve_audio_seconds_total{model=\"whisper-tiny\"}"), std::string::npos);
  EXPECT_NE(metrics.find("mmserve_batch_size_count{model=\"whisper-tiny\",tower=\"audio\"}"), std::string::npos);
  EXPECT_NE(metrics.find("route=\"/v1/audio/transcriptions\",code=\"413\""), std::string::npos);
}

// Whisper tensor parallel through the server on a GPU: both ranks on GPU 0 (tp_collective: staged), so a one-GPU
// host runs the grouping, the sharded executor (WhisperCudaTpModel behind the WhisperExecutor) and the decoding. The
// transcript must be exactly the one the executor gives in this process with the same options; that the sharded
// model equals the unsharded one is whisper_cuda_tp_test's.
TEST(AudioServerGpu, TranscribesWithAStagedTensorParallelGroupOnOneGpu) {
  MMSERVE_E2E_REQUIRE_GPU();
  const fs::path root = fs::temp_directory_path() / ("mmserve_e2e_audio_tp_" + std::to_string(::getpid()));
  fs::remove_all(root);
  copy_model(root, "whisper/whisper-tiny-mel80-f32", kWhisper,
             "devices: [cuda:0, cuda:0]\ntensor_parallel: 2\ntp_collective: staged\ndtype: f32\nmax_batch_size: 4\n");
  engine::ExecutorOptions options;
  options.device = Device::cuda(0);
  options.dtype = DType::kF32;
  options.batch_size_max = 4;
  options.tp_devices = {0, 0};
  options.tp_collective = "staged";
  auto executor = engine::WhisperExecutor::create(fixture("whisper/whisper-tiny-mel80-f32"), options);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  auto audio = audio::decode_audio_file(kJfk);
  ASSERT_TRUE(audio.ok()) << audio.status().to_string();
  auto expected = (*executor)->transcribe(audio->samples, engine::TranscribeOptions{});
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();

  ServerProcess server(root, {});
  ASSERT_TRUE(server.wait_ready(120s)) << server.stderr_text();
  const CurlResult meta = curl(server.url() + "/v2/models/" + kWhisper);
  ASSERT_EQ(meta.status, 200) << meta.body;
  EXPECT_EQ(json::parse(meta.body)["replicas"][0]["device"], "cuda:0+cuda:0") << meta.body;
  const CurlResult r = curl("-F 'file=@" + kJfk + "' -F 'model=" + kWhisper + "' -F response_format=verbose_json " +
                            server.url() + "/v1/audio/transcriptions");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, engine::format_transcript(*expected, engine::TranscriptFormat::kVerboseJson,
                                              engine::WhisperTask::kTranscribe));
  EXPECT_EQ(server.terminate(), 0) << server.stderr_text();
  fs::remove_all(root);
}

}  // namespace
}  // namespace mmserve
