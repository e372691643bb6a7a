// openai_audio_codec: the form fields of the audio routes (as cpp-httplib hands them over) and the streamed
// transcription events, byte for byte.
#include "api/openai_audio_codec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mmserve::api {
namespace {

using engine::WhisperTask;

std::vector<FormField> fields(std::vector<FormField> extra = {}) {
  std::vector<FormField> out = {{"file", "speech.wav", "audio/wav", "RIFFxxxxWAVE"}, {"model", "", "", "whisper-1"}};
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

void expect_invalid(std::vector<FormField> f, WhisperTask task, const std::string& needle) {
  StatusOr<OpenAiTranscriptionRequest> r = parse_openai_audio_form(f, task);
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(OpenAiAudioCodec, Defaults) {
  std::vector<FormField> f = fields();
  StatusOr<OpenAiTranscriptionRequest> r = parse_openai_audio_form(f, WhisperTask::kTranscribe);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "whisper-1");
  EXPECT_EQ(r->audio, "RIFFxxxxWAVE");
  EXPECT_EQ(r->filename, "speech.wav");
  EXPECT_EQ(r->format, engine::TranscriptFormat::kJson);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->options.task, WhisperTask::kTranscribe);
  EXPECT_EQ(r->options.temperatures, engine::TranscribeOptions().temperatures);  // the reference's schedule
  EXPECT_TRUE(r->options.language.empty());
}

TEST(OpenAiAudioCodec, EveryField) {
  std::vector<FormField> f = fields({{"language", "", "", " fr "},
                                     {"prompt", "", "", "Glossary: mmserve."},
                                     {"response_format", "", "", "verbose_json"},
                                     {"temperature", "", "", "0.6"},
                                     {"timestamp_granularities[]", "", "", "segment"},
                                     {"stream", "", "", "true"}});
  StatusOr<OpenAiTranscriptionRequest> r = parse_openai_audio_form(f, WhisperTask::kTranscribe);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->options.language, "fr");
  EXPECT_EQ(r->options.initial_prompt, "Glossary: mmserve.");
  EXPECT_EQ(r->format, engine::TranscriptFormat::kVerboseJson);
  ASSERT_EQ(r->options.temperatures.size(), 3u);
  EXPECT_NEAR(r->options.temperatures[0], 0.6f, 1e-6);
  EXPECT_NEAR(r->options.temperatures[2], 1.0f, 1e-6);
  EXPECT_TRUE(r->stream);
  for (const char* name : {"json", "text", "srt", "vtt", "verbose_json"}) {
    std::vector<FormField> g = fields({{"response_format", "", "", name}});
    EXPECT_TRUE(parse_openai_audio_form(g, WhisperTask::kTranslate).ok()) << name;
  }
  std::vector<FormField> t = fields({{"temperature", "", "", "1"}});
  ASSERT_TRUE(parse_openai_audio_form(t, WhisperTask::kTranscribe).ok());
}

TEST(OpenAiAudioCodec, Refusals) {
  const WhisperTask tr = WhisperTask::kTranscribe;
  expect_invalid({{"model", "", "", "m"}}, tr, "'file' is required");
  expect_invalid({{"file", "a.wav", "", "x"}}, tr, "'model' is required");
  expect_invalid({{"file", "a.wav", "", "x"}, {"model", "", "", "  "}}, tr, "'model' must not be empty");
  expect_invalid(fields({{"file", "b.wav", "", "y"}}), tr, "'file' is given twice");
  expect_invalid({{"file", "a.wav", "", ""}, {"model", "", "", "m"}}, tr, "'file' is empty");
  expect_invalid(fields({{"response_format", "", "", "mp3"}}), tr, "response_format");
  expect_invalid(fields({{"temperature", "", "", "-0.1"}}), tr, "temperature");
  expect_invalid(fields({{"temperature", "", "", "0.2x"}}), tr, "temperature");
  expect_invalid(fields({{"temperature", "", "", "nan"}}), tr, "temperature");
  expect_invalid(fields({{"stream", "", "", "yes please"}}), tr, "'stream' must be true or false");
  expect_invalid(fields({{"timestamp_granularities[]", "", "", "word"}}), tr, "word timestamps are not supported");
  expect_invalid(fields({{"timestamp_granularities[]", "", "", "char"}}), tr, "not one of segment, word");
  expect_invalid(fields({{"prompt", "", "", std::string("\xff\xfe")}}), tr, "not valid UTF-8");
  expect_invalid(fields({{"prompt", "", "", std::string(70000, 'a')}}), tr, "longer than");
  expect_invalid(fields({{"n", "", "", "2"}}), tr, "Unrecognized request argument supplied: n");
  expect_invalid(fields({{"", "", "", "2"}}), tr, "Unrecognized request argument supplied: ");
  // Transcription-only fields on a translation.
  for (const char* name : {"language", "stream", "timestamp_granularities[]"}) {
    expect_invalid(fields({{name, "", "", "x"}}), WhisperTask::kTranslate, "Unrecognized request argument");
  }
}

TEST(OpenAiAudioCodec, StreamEvents) {
  EXPECT_EQ(encode_transcript_delta_event(" Hello \"world\""),
            "data: {\"type\":\"transcript.text.delta\",\"delta\":\" Hello \\\"world\\\"\"}\n\n");
  engine::Transcript t;
  t.text = " Hello world";
  t.duration = 10.2;
  EXPECT_EQ(encode_transcript_done_event(t),
            "data: {\"type\":\"transcript.text.done\",\"text\":\" Hello world\","
            "\"usage\":{\"type\":\"duration\",\"seconds\":11}}\n\n");
  const std::string error = encode_stream_error_event(400, "audio: bad");
  ASSERT_EQ(error.rfind("data: ", 0), 0u);
  ASSERT_EQ(error.substr(error.size() - 2), "\n\n");
  const nlohmann::json body = nlohmann::json::parse(error.substr(6));
  EXPECT_EQ(body["error"]["message"], "audio: bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace mmserve::api
