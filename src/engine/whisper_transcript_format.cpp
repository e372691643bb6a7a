// Transcript output formats (whisper_executor.h): OpenAI's response_format values. json is {"text"}; text is the
// text and a newline; srt and vtt number/time the segments as openai-whisper's WriteSRT / WriteVTT do (hours
// always written, "," vs "." before the milliseconds, segment text stripped); verbose_json is OpenAI's
// transcription object with every segment's fields.
// Tests: tests/unit/engine/whisper_executor_test.cpp, tests/e2e/cli_test.cpp.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/whisper_executor.h"
#include "frontends/text/whisper_languages.h"

namespace mmserve::engine {
namespace {

// openai-whisper utils.format_timestamp(seconds, always_include_hours=True, decimal_marker).
std::string format_timestamp(double seconds, char decimal_marker) {
  if (!(seconds >= 0.0)) seconds = 0.0;
  int64_t ms = static_cast<int64_t>(std::llround(seconds * 1000.0));
  const int64_t hours = ms / 3'600'000;
  ms -= hours * 3'600'000;
  const int64_t minutes = ms / 60'000;
  ms -= minutes * 60'000;
  const int64_t secs = ms / 1000;
  ms -= secs * 1000;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%02lld:%02lld:%02lld%c%03lld", static_cast<long long>(hours),
                static_cast<long long>(minutes), static_cast<long long>(secs), decimal_marker,
                static_cast<long long>(ms));
  return buf;
}

std::string strip(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  // "-->" in a cue would end it early (openai-whisper's writers replace it too).
  std::string out = s.substr(first, last - first + 1);
  for (size_t pos = out.find("-->"); pos != std::string::npos; pos = out.find("-->", pos)) out.replace(pos, 3, "->");
  return out;
}

std::string language_name(const std::string& code) {
  for (const text::WhisperLanguage& l : text::whisper_languages()) {
    if (l.code == code) return std::string(l.name);
  }
  return code;
}

// Non-finite floats are not JSON; they are written as null.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

StatusOr<TranscriptFormat> parse_transcript_format(const std::string& name) {
  if (name == "json") return TranscriptFormat::kJson;
  if (name == "text") return TranscriptFormat::kText;
  if (name == "srt") return TranscriptFormat::kSrt;
  if (name == "vtt") return TranscriptFormat::kVtt;
  if (name == "verbose_json") return TranscriptFormat::kVerboseJson;
  return invalid_argument("unknown response format \"" + name + "\" (json, text, srt, vtt or verbose_json)");
}

std::string transcript_content_type(TranscriptFormat format) {
  switch (format) {
    case TranscriptFormat::kJson:
    case TranscriptFormat::kVerboseJson: return "application/json";
    case TranscriptFormat::kVtt: return "text/vtt; charset=utf-8";
    case TranscriptFormat::kSrt:
    case TranscriptFormat::kText: return "text/plain; charset=utf-8";
  }
  return "text/plain; charset=utf-8";
}

std::string format_transcript(const Transcript& transcript, TranscriptFormat format, WhisperTask task) {
  // The JSON writer replaces invalid UTF-8 (a decode may end mid-character) instead of throwing.
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  switch (format) {
    case TranscriptFormat::kJson: return nlohmann::json{{"text", transcript.text}}.dump(-1, ' ', false, kReplace);
    case TranscriptFormat::kText: return transcript.text + "\n";
    case TranscriptFormat::kSrt: {
      std::string out;
      int64_t index = 1;
      for (const TranscriptSegment& s : transcript.segments) {
        out += std::to_string(index++) + "\n" + format_timestamp(s.start, ',') + " --> " +
               format_timestamp(s.end, ',') + "\n" + strip(s.text) + "\n\n";
      }
      return out;
    }
    case TranscriptFormat::kVtt: {
      std::string out = "WEBVTT\n\n";
      for (const TranscriptSegment& s : transcript.segments) {
        out += format_timestamp(s.start, '.') + " --> " + format_timestamp(s.end, '.') + "\n" + strip(s.text) + "\n\n";
      }
      return out;
    }
    case TranscriptFormat::kVerboseJson: {
      nlohmann::json segments = nlohmann::json::array();
      for (const TranscriptSegment& s : transcript.segments) {
        segments.push_back({{"id", s.id},
                            {"seek", s.seek},
                            {"start", number(s.start)},
                            {"end", number(s.end)},
                            {"text", s.text},
                            {"tokens", s.tokens},
                            {"temperature", number(s.temperature)},
                            {"avg_logprob", number(s.avg_logprob)},
                            {"compression_ratio", number(s.compression_ratio)},
                            {"no_speech_prob", number(s.no_speech_prob)}});
      }
      nlohmann::json j{{"task", task == WhisperTask::kTranslate ? "translate" : "transcribe"},
                       {"language", language_name(transcript.language)},
                       {"duration", number(transcript.duration)},
                       {"text", transcript.text},
                       {"segments", std::move(segments)}};
      if (transcript.vad_skipped_seconds > 0.0) j["vad_skipped_seconds"] = transcript.vad_skipped_seconds;
      return j.dump(-1, ' ', false, kReplace);
    }
  }
  return transcript.text;
}

}  // namespace mmserve::engine
