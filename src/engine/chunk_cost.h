// engine/chunk_cost.h: how many rows (images, texts) one chunk of a batch may take so that its work runs for about
// a time budget (BatchHooks::chunk_budget_ms), learned from the chunks' measured times.
//
// A chunk's time is fit as `fixed + per_row * rows` by least squares over the recent chunks (an exponential
// forgetting of 0.8 per chunk: the device's speed changes with load). A per-row average alone is wrong wherever a
// chunk has a cost of its own: a GPU batch's launch and copies, and above all a batch PNG decode, where one warp
// inflates each image so a chunk of 1 and a chunk of 64 both take the longest image's ~7 ms. With the average,
// that 7 ms per row shrank every chunk to 1 image and the server to 200 images/s (2026-12-07); with the fit, the
// fixed cost is paid once per chunk and the chunk grows to the batch.
//
// Until two chunk sizes have been seen the split cannot be told apart, so the fit is taken as all per-row (the
// cautious reading, small chunks) and the next chunk is twice as large to learn it (one chunk in a while may run
// up to twice the budget).
#pragma once

#include <algorithm>
#include <cstdint>

namespace mmserve::engine {

class ChunkCost {
 public:
  struct Fit {
    double fixed_ms = 0;
    double row_ms = 0;
    bool identified = false;  // two chunk sizes seen recently: fixed and per-row told apart
  };

  void observe(int64_t rows, double ms) {
    if (rows <= 0 || !(ms >= 0)) return;
    const double x = static_cast<double>(rows);
    w_ = kForget * w_ + 1;
    x_ = kForget * x_ + x;
    y_ = kForget * y_ + ms;
    xx_ = kForget * xx_ + x * x;
    xy_ = kForget * xy_ + x * ms;
  }

  bool measured() const { return w_ > 0; }

  Fit fit() const {
    Fit f;
    if (w_ <= 0) return f;
    const double mx = x_ / w_, my = y_ / w_;
    const double var = xx_ / w_ - mx * mx;
    if (var > kMinRelativeSpread * mx * mx) {
      f.identified = true;
      f.row_ms = (xy_ / w_ - mx * my) / var;
      f.fixed_ms = my - f.row_ms * mx;
      if (f.row_ms < 0) {  // noise on a flat cost: all of it fixed
        f.row_ms = 0;
        f.fixed_ms = my;
      } else if (f.fixed_ms < 0) {  // noise on a linear cost: a line through the origin
        f.fixed_ms = 0;
        f.row_ms = xy_ / xx_;
      }
      return f;
    }
    f.row_ms = my / mx;  // one size only: the cautious reading
    return f;
  }

  // The rows of the next chunk, 1..rows: the most whose per-row part fits the budget. The fixed part is paid once
  // a chunk whatever its size, so it is not charged: smaller chunks would not make an urgent request wait less
  // than `fixed`, only make the batch slower (it waits at most fixed + budget). `power_of_two` rounds down to one
  // (CUDA-graph buckets). No budget or no measurement: the whole batch.
  int64_t rows_for(double budget_ms, int64_t rows, bool power_of_two) const {
    if (rows <= 1 || budget_ms <= 0 || !measured()) return std::max<int64_t>(rows, 1);
    const Fit f = fit();
    int64_t chunk = rows;
    if (f.row_ms > 0) {
      const double fits = budget_ms / f.row_ms;
      chunk = fits >= static_cast<double>(rows) ? rows : std::max<int64_t>(1, static_cast<int64_t>(fits));
    }
    if (!f.identified) chunk = std::min(rows, chunk * 2);  // learn the split
    if (power_of_two && chunk < rows) {
      int64_t p = 1;
      while (p * 2 <= chunk) p *= 2;
      chunk = p;
    }
    return chunk;
  }

 private:
  static constexpr double kForget = 0.8;
  static constexpr double kMinRelativeSpread = 1e-3;  // variance of the sizes over their mean squared
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
};

}  // namespace mmserve::engine
