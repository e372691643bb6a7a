// OpenAI audio form fields and transcription stream events (see openai_audio_codec.h).
// Tests: tests/unit/api/openai_audio_codec_test.cpp.
#include "api/openai_audio_codec.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "api/error_mapping.h"
#include "api/json_writer.h"
#include "frontends/text/unicode_text.h"

namespace mmserve::api {
namespace {

constexpr size_t kTextFieldBytesMax = 64 * 1024;  // prompt and the short fields; the file has its own limits

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// OpenAI's own message for a field it does not know.
Status unknown_field(const std::string& name) {
  return invalid_argument("Unrecognized request argument supplied: " + name.substr(0, 64));
}

StatusOr<float> parse_temperature(const std::string& text) {
  const std::string t = trimmed(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(value) || value < 0 || value > 1) {
    return invalid_argument("'temperature' must be a number from 0 to 1, got '" + text.substr(0, 32) + "'");
  }
  return static_cast<float>(value);
}

StatusOr<bool> parse_bool(const std::string& field, const std::string& text) {
  const std::string t = lower(trimmed(text));
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  return invalid_argument("'" + field + "' must be true or false, got '" + text.substr(0, 32) + "'");
}

}  // namespace

StatusOr<OpenAiTranscriptionRequest> parse_openai_audio_form(std::vector<FormField>& fields, engine::WhisperTask task) {
  const bool transcribe = task == engine::WhisperTask::kTranscribe;
  OpenAiTranscriptionRequest out;
  out.task = task;
  out.options.task = task;
  bool has_file = false;
  std::set<std::string> seen;
  for (FormField& f : fields) {
    const bool granularity = f.name == "timestamp_granularities[]" || f.name == "timestamp_granularities";
    const bool known = f.name == "file" || f.name == "model" || f.name == "prompt" || f.name == "response_format" ||
                       f.name == "temperature" ||
                       (transcribe && (f.name == "language" || f.name == "stream" || granularity));
    if (!known) return unknown_field(f.name);
    if (!granularity && !seen.insert(f.name).second) return invalid_argument("'" + f.name + "' is given twice");
    if (f.name == "file") {
      if (f.content.empty()) return invalid_argument("'file' is empty (0 bytes): send an audio file");
      out.audio = std::move(f.content);
      out.filename = f.filename;
      has_file = true;
      continue;
    }
    // Every other field is short text.
    if (f.content.size() > kTextFieldBytesMax) {
      return invalid_argument("'" + f.name + "' is longer than " + std::to_string(kTextFieldBytesMax) + " bytes");
    }
    if (Status utf8 = text::validate_utf8(f.content); !utf8.ok()) {
      return invalid_argument("'" + f.name + "' is not valid UTF-8: " + utf8.message());
    }
    if (f.name == "model") {
      out.model = trimmed(f.content);
      if (out.model.empty()) return invalid_argument("'model' must not be empty");
    } else if (f.name == "language") {
      out.options.language = trimmed(f.content);
    } else if (f.name == "prompt") {
      out.options.initial_prompt = f.content;
    } else if (f.name == "response_format") {
      StatusOr<engine::TranscriptFormat> format = engine::parse_transcript_format(trimmed(f.content));
      if (!format.ok()) {
        return invalid_argument("'response_format' must be one of json, text, srt, verbose_json, vtt; got '" +
                                f.content.substr(0, 32) + "'");
      }
      out.format = *format;
    } else if (f.name == "temperature") {
      ASSIGN_OR_RETURN(const float t, parse_temperature(f.content));
      // The reference's schedule: t, t + 0.2, ... up to 1 (t = 0 is its default, 0..1 in steps of 0.2).
      out.options.temperatures.clear();
      for (int step = 0; t + 0.2 * step <= 1.0 + 1e-6; ++step) {
        out.options.temperatures.push_back(static_cast<float>(t + 0.2 * step));
      }
    } else if (f.name == "stream") {
      ASSIGN_OR_RETURN(out.stream, parse_bool("stream", f.content));
    } else if (granularity) {
      const std::string g = trimmed(f.content);
      if (g == "word") {
        return invalid_argument("timestamp_granularities: word timestamps are not supported (only segment)");
      }
      if (g != "segment") {
        return invalid_argument("timestamp_granularities: '" + g.substr(0, 32) + "' is not one of segment, word");
      }
    }
  }
  if (!has_file) return invalid_argument("'file' is required: send the audio as a multipart file field");
  if (out.model.empty()) return invalid_argument("'model' is required");
  return out;
}

std::string encode_transcript_delta_event(const std::string& delta) {
  std::string out = "data: {\"type\":\"transcript.text.delta\",\"delta\":";
  append_json_string(out, delta);
  out += "}\n\n";
  return out;
}

std::string encode_transcript_done_event(const engine::Transcript& transcript) {
  std::string out = "data: {\"type\":\"transcript.text.done\",\"text\":";
  append_json_string(out, transcript.text);
  // OpenAI bills whisper by the second and reports it as duration usage.
  const double seconds = std::ceil(std::max(0.0, transcript.duration));
  out += ",\"usage\":{\"type\":\"duration\",\"seconds\":" + std::to_string(static_cast<int64_t>(seconds)) + "}}\n\n";
  return out;
}

std::string encode_stream_error_event(int http_status, const std::string& message) {
  // error_body's OpenAI shape is {"error": {...}}: the SDKs raise it as an APIError mid-stream.
  return "data: " + error_body(ApiFamily::kOpenAi, http_status, message) + "\n\n";
}

}  // namespace mmserve::api
