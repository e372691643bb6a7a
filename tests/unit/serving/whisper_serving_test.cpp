// A real InferenceServer serving the tiny Whisper fixture (tests/fixtures/whisper/whisper-tiny-mel80-f32, random
// weights: its text is gibberish, so transcripts are compared with what the WhisperExecutor itself gives for the
// same audio, never with a hard-coded string): one request, concurrent requests batched through
// transcribe_batch, the streaming segment callback and its cancellation, metadata and metrics, the audio limits
// of mmserve.yaml, and the refusals (text to a speech model, audio to CLIP, broken audio).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"
#include "server_test_util.h"

namespace mmserve::serving {
namespace {

namespace fs = std::filesystem;
using testing::fixture;
using testing::transcript_of;
using testing::whisper_params;
using testing::read_bytes;
using testing::request;
using testing::text_input;

const std::string kWhisperFixture = fixture("whisper/whisper-tiny-mel80-f32");

InputItem audio_input(std::string bytes) {
  InputItem item;
  item.kind = InputKind::kAudioBytes;
  item.audio_bytes = std::move(bytes);
  return item;
}

// Deterministic decoding (greedy, no fallback sampling) keeps the tiny model's runs short and comparable.
engine::TranscribeOptions greedy() {
  engine::TranscribeOptions o;
  o.language = "en";
  o.temperatures = {0.0f};
  o.max_new_tokens = 24;
  return o;
}

RequestSpec transcription(const std::string& model, const std::string& bytes,
                          engine::TranscribeOptions options = greedy()) {
  RequestSpec spec = request(model, {audio_input(bytes)});
  spec.params = whisper_params(std::move(options));
  return spec;
}

void expect_same(const engine::Transcript& a, const engine::Transcript& b) {
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.language, b.language);
  EXPECT_DOUBLE_EQ(a.duration, b.duration);
  ASSERT_EQ(a.segments.size(), b.segments.size());
  for (size_t i = 0; i < a.segments.size(); ++i) {
    EXPECT_EQ(a.segments[i].tokens, b.segments[i].tokens) << "segment " << i;
    EXPECT_DOUBLE_EQ(a.segments[i].start, b.segments[i].start);
    EXPECT_DOUBLE_EQ(a.segments[i].end, b.segments[i].end);
  }
}

class WhisperServing : public testing::RepositoryTest {
 protected:
  void add_whisper(const std::string& name, const std::string& yaml = "") {
    const fs::path dir = root_ / name;
    fs::create_directories(dir);
    for (const auto& entry : fs::directory_iterator(kWhisperFixture)) {
      const std::string file = entry.path().filename().string();
      if (file.rfind("golden", 0) == 0) continue;
      fs::copy_file(entry.path(), dir / file, fs::copy_options::overwrite_existing);
    }
    if (!yaml.empty()) std::ofstream(dir / "mmserve.yaml") << yaml;
  }
  // What the executor gives for the file, outside the server.
  engine::Transcript reference(const std::string& bytes, const engine::TranscribeOptions& options = greedy()) {
    auto audio =
        audio::decode_audio(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    EXPECT_TRUE(audio.ok()) << audio.status().to_string();
    auto executor = engine::WhisperExecutor::create(kWhisperFixture, engine::ExecutorOptions{});
    EXPECT_TRUE(executor.ok()) << executor.status().to_string();
    auto t = (*executor)->transcribe(audio->samples, options);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return *t;
  }
  const std::string jfk_ = read_bytes(fixture("audio/jfk.wav"));
};

TEST_F(WhisperServing, TranscriptEqualsTheExecutors) {
  add_whisper("whisper");
  InferenceServer& server = start();
  ASSERT_TRUE(server.ready());
  auto r = server.infer(transcription("whisper", jfk_));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_NE(engine::output_as<engine::TranscriptOutput>(r->output), nullptr);
  expect_same(transcript_of(*r), reference(jfk_));
  EXPECT_NEAR(transcript_of(*r).duration, 11.0, 1e-9);
  EXPECT_EQ(engine::output_as<engine::ClipOutput>(r->output), nullptr);
  EXPECT_GT(r->times.preprocess_ms, 0);
  EXPECT_GT(r->times.compute_ms, 0);
  EXPECT_EQ(counter("mmserve_requests_total", {"model", "outcome"}, {"whisper", "success"}), 1);
  EXPECT_NEAR(counter("mmserve_audio_seconds_total", {"model"}, {"whisper"}), 11.0, 1e-9);
  EXPECT_EQ(histogram("mmserve_batch_size", {"model", "tower"}, {"whisper", "audio"}).count(), 1u);

  auto meta = server.model_metadata("whisper");
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  EXPECT_EQ(meta->platform, "mmserve_whisper");
  ASSERT_EQ(meta->inputs.size(), 1u);
  EXPECT_EQ(meta->inputs[0].name, "audio");
  EXPECT_EQ(meta->inputs[0].datatype, "BYTES");
  ASSERT_EQ(meta->outputs.size(), 3u);
  EXPECT_EQ(meta->outputs[0].name, "text");
  auto status = server.model_status("whisper");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->architecture, "WhisperForConditionalGeneration");
  EXPECT_GT(status->memory_bytes, 0);
}

TEST_F(WhisperServing, ConcurrentRequestsAreBatchedAndEqualAlone) {
  add_whisper("whisper", "max_batch_size: 4\nmax_queue_delay_ms: 300\n");
  InferenceServer& server = start();
  const engine::Transcript alone = reference(jfk_);
  constexpr int kClients = 4;
  std::vector<StatusOr<ResponseData>> results(kClients, Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] { results[i] = server.infer(transcription("whisper", jfk_)); });
  }
  for (std::thread& t : clients) t.join();
  int largest = 0;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status().to_string();
    expect_same(transcript_of(*results[i]), alone);
    largest = std::max(largest, results[i]->batch_size);
  }
  EXPECT_GT(largest, 1) << "no two requests shared a transcribe_batch call";
}

TEST_F(WhisperServing, SegmentCallbackStreamsAndCancels) {
  add_whisper("whisper");
  InferenceServer& server = start();
  engine::TranscribeOptions options = greedy();
  options.timestamps = true;
  const engine::Transcript alone = reference(jfk_, options);
  std::vector<std::string> streamed;
  RequestSpec spec = transcription("whisper", jfk_, options);
  spec.params = whisper_params(options, [&](const engine::TranscriptSegment& s) {
    streamed.push_back(s.text);
    return true;
  });
  auto r = server.infer(std::move(spec));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_same(transcript_of(*r), alone);
  ASSERT_EQ(streamed.size(), transcript_of(*r).segments.size());
  std::string joined;
  for (const std::string& s : streamed) joined += s;
  EXPECT_EQ(joined, transcript_of(*r).text);

  if (!alone.segments.empty()) {  // a callback that says no cancels the request
    spec = transcription("whisper", jfk_, options);
    spec.params = whisper_params(options, [](const engine::TranscriptSegment&) { return false; });
    r = server.infer(std::move(spec));
    EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
    EXPECT_EQ(counter("mmserve_requests_total", {"model", "outcome"}, {"whisper", "cancelled"}), 1);
  }
}

TEST_F(WhisperServing, Refusals) {
  add_whisper("whisper", "audio_seconds_max: 5\n");
  add_whisper("roomy");
  add_model("clip");
  InferenceServer& server = start();
  auto r = server.infer(request("whisper", {text_input("hello")}));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("speech-to-text"), std::string::npos) << r.status().message();
  r = server.infer(transcription("clip", jfk_));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("CLIP model"), std::string::npos) << r.status().message();
  r = server.infer(transcription("whisper", jfk_));  // 11 s > audio_seconds_max 5
  EXPECT_EQ(r.status().code(), StatusCode::kTooLarge) << r.status().to_string();
  r = server.infer(transcription("roomy", "not audio at all"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  r = server.infer(transcription("roomy", jfk_.substr(0, 20)));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  r = server.infer(transcription("roomy", ""));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  engine::TranscribeOptions bad = greedy();
  bad.language = "xx-not-a-language";
  r = server.infer(transcription("roomy", jfk_, bad));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  // Still serving.
  r = server.infer(transcription("roomy", jfk_));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GE(counter("mmserve_requests_total", {"model", "outcome"}, {"whisper", "invalid"}), 2);
}

TEST_F(WhisperServing, AFaultyReplicasBatchIsTranscribedByTheOther) {
  // Replica 1 fails every batch (test seam, model_runtime.h): the audio its batch consumed was kept and the
  // request, re-queued, is transcribed by replica 0 exactly as alone.
  ::setenv("MMSERVE_TEST_REPLICA_FAULTS", "whisper:1:all", 1);
  add_whisper("whisper", "devices: [cpu, cpu]\nthreads: 1\n");
  InferenceServer& server = start();
  ::unsetenv("MMSERVE_TEST_REPLICA_FAULTS");
  const engine::Transcript alone = reference(jfk_);
  auto healthy = [&](const char* replica) {
    return server.metrics()
        .gauge("mmserve_replica_healthy", "", {"model", "replica", "device"})
        .with({"whisper", replica, "cpu"})
        .value();
  };
  for (int i = 0; i < 40 && healthy("1") == 1; ++i) {
    auto a = submit_async(transcription("whisper", jfk_));  // two at once: both engine threads are asked
    auto b = submit_async(transcription("whisper", jfk_));
    for (auto* f : {&a, &b}) {
      StatusOr<ResponseData> r = f->get();
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      expect_same(transcript_of(*r), alone);
    }
  }
  EXPECT_EQ(healthy("1"), 0) << "replica 1 never took a batch";
  EXPECT_EQ(healthy("0"), 1);
  EXPECT_TRUE(server.ready());
  auto meta = server.model_metadata("whisper");
  ASSERT_TRUE(meta.ok());
  ASSERT_EQ(meta->replicas.size(), 2u);
  EXPECT_FALSE(meta->replicas[1].healthy);
  EXPECT_EQ(counter("mmserve_requests_total", {"model", "outcome"}, {"whisper", "error"}), 0);
}

}  // namespace
}  // namespace mmserve::serving
