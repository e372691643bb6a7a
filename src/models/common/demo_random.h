// The demo models' random numbers: splitmix64 + Box-Muller, so a demo checkpoint's bytes are identical on every
// platform and compiler (std::normal_distribution is not specified bit for bit). Used by clip_demo.cpp and
// sam_demo.cpp. Tests: through their demo tests (the same bytes twice).
#pragma once

#include <cmath>
#include <cstdint>

namespace mmserve::models {

class NormalGenerator {
 public:
  explicit NormalGenerator(uint64_t seed) : state_(seed) {}
  float next() {
    const double u1 = (static_cast<double>(next_u64() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = static_cast<double>(next_u64() >> 11) / 9007199254740992.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

}  // namespace mmserve::models
