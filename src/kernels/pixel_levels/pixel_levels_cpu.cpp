// The CPU twin of pixel_levels.h: a table lookup per value.
#include "core/status.h"
#include "kernels/pixel_levels/pixel_levels.h"

namespace mmserve::kernels {

void expand_pixel_levels(const uint8_t* levels, int64_t n, int64_t channels, int64_t plane, const float* table,
                         float* out) {
  MMSERVE_CHECK(n >= 0 && channels >= 1 && plane >= 0, "expand_pixel_levels: bad shape");
  MMSERVE_CHECK((levels != nullptr && table != nullptr && out != nullptr) || n * plane == 0,
                "expand_pixel_levels: null pointer");
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      const float* t = table + c * 256;
      const size_t base = static_cast<size_t>((i * channels + c) * plane);
      for (int64_t p = 0; p < plane; ++p) out[base + p] = t[levels[base + p]];
    }
  }
}

}  // namespace mmserve::kernels
