// OpenAI-compatible audio requests: the form fields of POST /v1/audio/transcriptions and
// /v1/audio/translations, and the server-sent events of a streamed transcription.
//
// The multipart/form-data body itself is split into parts by cpp-httplib (http_server.cpp turns a malformed
// one into a 400); this codec checks the parts as OpenAI's API documents them: `file` (required, the encoded
// audio) and `model` (required); `language` (transcriptions only), `prompt`, `response_format` (json, text,
// srt, vtt, verbose_json), `temperature` (0..1: the first temperature of the reference's fallback schedule,
// 0 = the full schedule 0, 0.2, ..., 1), `timestamp_granularities[]` (transcriptions; "segment" only: word
// timestamps are refused), `stream` (transcriptions; "true"/"false"). Unknown and repeated fields are refused
// with OpenAI's own message. Streaming answers `data: {"type":"transcript.text.delta","delta":...}` per
// finished segment, then `data: {"type":"transcript.text.done","text":...}`, as OpenAI's streaming
// transcription events; a failure after the stream started is `data: {"error": {...}}`, which OpenAI's SDKs
// raise as an APIError. Tests: tests/unit/api/openai_audio_codec_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/whisper_executor.h"

namespace mmserve::api {

// One part of a multipart/form-data body.
struct FormField {
  std::string name;
  std::string filename;      // empty for plain fields
  std::string content_type;  // the part's Content-Type, if any
  std::string content;
};

struct OpenAiTranscriptionRequest {
  std::string model;
  std::string audio;  // the `file` part's bytes
  std::string filename;
  engine::WhisperTask task = engine::WhisperTask::kTranscribe;
  engine::TranscribeOptions options;
  engine::TranscriptFormat format = engine::TranscriptFormat::kJson;
  bool stream = false;
};

// `fields` in body order (consumed: the file's bytes are moved). kInvalidArgument naming the field.
StatusOr<OpenAiTranscriptionRequest> parse_openai_audio_form(std::vector<FormField>& fields, engine::WhisperTask task);

// One server-sent event each (`data: {...}\n\n`).
std::string encode_transcript_delta_event(const std::string& delta);
std::string encode_transcript_done_event(const engine::Transcript& transcript);
std::string encode_stream_error_event(int http_status, const std::string& message);

}  // namespace mmserve::api
