// SPEC 3.2's QoS score (declared in request.h): a weighted sum of the request's image, audio and text sizes,
// each normalised by its maximum and clamped to [0, 1]. The scheduler (request_queue.cpp) serves higher
// scores first within a priority class, as the design document treats the score as a priority.
// Tests: tests/unit/serving/qos_test.cpp (SPEC 3.2's example rows computed by hand, clamping, weights).
#include <algorithm>
#include <cmath>

#include "serving/request.h"

namespace mmserve::serving {
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

}  // namespace mmserve::serving
