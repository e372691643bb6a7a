// The KServe v2 response of a Whisper model (see kserve_codec.h, encode_kserve_transcript): BYTES [1] outputs
// `text`, `segments` and `language`, in JSON or the binary tensor extension. `segments` holds the segments as
// OpenAI's verbose_json lists them (id, seek, start, end, text, tokens, temperature, avg_logprob,
// compression_ratio, no_speech_prob), one JSON array in one string. Tests: tests/unit/api/kserve_codec_test.cpp.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "api/json_writer.h"
#include "api/kserve_codec.h"

namespace mmserve::api {
namespace {

std::string segments_json(const engine::Transcript& transcript) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const engine::TranscriptSegment& s : transcript.segments) {
    nlohmann::ordered_json e;
    e["id"] = s.id;
    e["seek"] = s.seek;
    e["start"] = s.start;
    e["end"] = s.end;
    e["text"] = s.text;
    e["tokens"] = s.tokens;
    e["temperature"] = s.temperature;
    e["avg_logprob"] = s.avg_logprob;
    e["compression_ratio"] = s.compression_ratio;
    e["no_speech_prob"] = s.no_speech_prob;
    out.push_back(std::move(e));
  }
  return dump_json(out);
}

struct BytesOutput {
  const char* name;
  std::string value;
};

}  // namespace

StatusOr<EncodedBody> encode_kserve_transcript(const std::string& model, const KServeInferRequest& request,
                                               const engine::Transcript& transcript) {
  const BytesOutput available[] = {
      {"text", transcript.text}, {"segments", segments_json(transcript)}, {"language", transcript.language}};
  std::vector<std::pair<const BytesOutput*, bool>> chosen;  // output, binary
  if (request.outputs.empty()) {
    for (const BytesOutput& o : available) chosen.emplace_back(&o, request.binary_output);
  } else {
    for (const KServeOutputRequest& o : request.outputs) {
      const BytesOutput* found = nullptr;
      for (const BytesOutput& a : available) {
        if (o.name == a.name) found = &a;
      }
      if (found == nullptr) {
        return invalid_argument("output '" + o.name.substr(0, 64) +
                                "' is not produced by a speech model (it gives text, segments, language)");
      }
      chosen.emplace_back(found, o.binary);
    }
  }
  EncodedBody out;
  std::string& header = out.body;
  std::string binary;
  header += "{\"model_name\":";
  append_json_string(header, model);
  header += ",\"model_version\":\"1\"";
  if (request.id) {
    header += ",\"id\":";
    append_json_string(header, *request.id);
  }
  header += ",\"outputs\":[";
  bool any_binary = false;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const auto& [output, is_binary] = chosen[i];
    if (i > 0) header += ',';
    header += "{\"name\":\"";
    header += output->name;
    header += "\",\"datatype\":\"BYTES\",\"shape\":[1]";
    if (is_binary) {
      const uint32_t n = static_cast<uint32_t>(output->value.size());
      const char length[4] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                              static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
      header += ",\"parameters\":{\"binary_data_size\":" + std::to_string(4 + output->value.size()) + "}}";
      binary.append(length, 4);
      binary += output->value;
      any_binary = true;
    } else {
      header += ",\"data\":[";
      append_json_string(header, output->value);
      header += "]}";
    }
  }
  header += "]}";
  if (any_binary) {
    out.json_length = header.size();
    out.content_type = "application/octet-stream";
    out.body += binary;
  }
  return out;
}

}  // namespace mmserve::api
