// SPEC 3.2's QoS score (declared in engine/executor.h): a weighted sum of the request's image, audio and text
// sizes, each normalised by its maximum and clamped to [0, 1]. The scheduler (request_queue.cpp) serves higher
// scores first within a priority class, as the design document treats the score as a priority. Also the
// preparers' shared pieces: the code-point count and the default of InputPreparer::decodes_media().
// Tests: tests/unit/serving/qos_test.cpp (SPEC 3.2's example rows computed by hand, clamping, weights).
#include <algorithm>
#include <cmath>

#include "engine/executor.h"

namespace mmserve::engine {
namespace {

// min(value / max, 1), never below 0; a NaN or a non-positive maximum contributes nothing.
double term(double value, double max) {
  if (!(max > 0) || std::isnan(value)) return 0.0;
  return std::clamp(value / max, 0.0, 1.0);
}

}  // namespace

double qos_score(double image_tokens, double audio_seconds, double text_chars, const QosWeights& w) {
  return w.image * term(image_tokens, w.image_tokens_max) + w.audio * term(audio_seconds, w.audio_seconds_max) +
         w.text * term(text_chars, w.text_chars_max);
}

int64_t count_code_points(const std::string& utf8) {
  int64_t n = 0;
  for (unsigned char c : utf8) n += (c & 0xC0) != 0x80;
  return n;
}

bool InputPreparer::decodes_media(const std::vector<InputItem>& inputs) const {
  return std::any_of(inputs.begin(), inputs.end(), [](const InputItem& in) {
    return in.kind == InputKind::kImageBytes || in.kind == InputKind::kAudioBytes;
  });
}

}  // namespace mmserve::engine
