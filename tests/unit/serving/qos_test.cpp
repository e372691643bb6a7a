// Tests of qos_score (qos.cpp) against SPEC 3.2's formula evaluated by hand on the document's two example
// rows (the document's own table values, 0.89 and 0.73, do not follow from its formula; the formula rules),
// plus clamping of every term to [0, 1] and configurable weights and maxima.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "serving/request.h"

namespace mmserve::serving {
namespace {

TEST(QosScore, SpecExampleRows) {
  // RQ-782: 1024 image tokens, 8.2 s of audio, 126 characters.
  //   0.4 * 1024/4096 + 0.35 * 8.2/60 + 0.25 * 126/512 = 0.1 + 0.0478333... + 0.0615234375 = 0.2093567708...
  const double rq782 = 0.4 * 0.25 + 0.35 * (8.2 / 60.0) + 0.25 * (126.0 / 512.0);
  EXPECT_NEAR(rq782, 0.2093567708, 1e-9);
  EXPECT_NEAR(qos_score(1024, 8.2, 126), rq782, 1e-12);
  // RQ-915: 512, 22.5 s, 48 -> 0.05 + 0.13125 + 0.0234375 = 0.2046875 exactly.
  EXPECT_NEAR(qos_score(512, 22.5, 48), 0.2046875, 1e-12);
  // The document's 0.89 / 0.73 are not what its formula gives.
  EXPECT_GT(std::fabs(qos_score(1024, 8.2, 126) - 0.89), 0.5);
}

TEST(QosScore, EveryTermIsClampedToZeroOne) {
  EXPECT_DOUBLE_EQ(qos_score(0, 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(qos_score(4096, 60, 512), 1.0);  // each term exactly 1
  EXPECT_DOUBLE_EQ(qos_score(1e9, 1e9, 1e9), 1.0);  // above the maxima: still 1
  EXPECT_DOUBLE_EQ(qos_score(8192, 0, 0), 0.4);     // image term alone saturates at its weight
  EXPECT_DOUBLE_EQ(qos_score(0, 0, 2048), 0.25);    // so does text (the document's Go code did not clamp it)
  EXPECT_DOUBLE_EQ(qos_score(-100, -5, -1), 0.0);   // negatives clamp to 0
  EXPECT_DOUBLE_EQ(qos_score(std::numeric_limits<double>::quiet_NaN(), 0, 512), 0.25);
}

TEST(QosScore, WeightsAndMaximaAreConfigurable) {
  QosWeights w;
  w.image = 1.0;
  w.audio = 0.0;
  w.text = 2.0;
  w.image_tokens_max = 100;
  w.text_chars_max = 10;
  // 1.0 * 50/100 + 0 + 2.0 * min(5/10, 1) = 0.5 + 1.0
  EXPECT_DOUBLE_EQ(qos_score(50, 30, 5, w), 1.5);
  EXPECT_DOUBLE_EQ(qos_score(500, 30, 50, w), 3.0);  // both clamped to 1 before weighting
}

}  // namespace
}  // namespace mmserve::serving
