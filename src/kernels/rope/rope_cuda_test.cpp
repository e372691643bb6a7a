// Tests of apply_rope_cuda() against its CPU twin apply_rope(const RopeArgs&) on the same inputs: every dtype,
// Llama-3-8B / Qwen / odd head shapes (16-byte, pair and scalar packs), the fused q+k call over a QKV row (v and
// the padding untouched), positions up to 131071 with Llama 3.1's scaled frequencies, and broken arguments.
// Skipped, with the reason, where no GPU is visible.
//
// Tolerance, per output: |gpu - cpu| <= 2^-20 * (|x1| + |x2|) + (16-bit y: one ulp of the type at |cpu|).
// Both sides form the angle as the same f32 product positions[r] * inv_freq[i], so the arguments are identical
// bit for bit at every position; both then evaluate cos/sin of that f32 number with full range reduction (glibc
// < 1 ulp, CUDA's sincosf <= 2 ulp over the whole range), so cos and sin differ by <= 3 ulp of a value <= 1,
// i.e. <= 3 * 2^-24 absolute, independent of the position. x1 * c - x2 * s then differs by <= 3 * 2^-24 * (|x1| +
// |x2|) from that, plus the rounding of the products and the sum, contracted into FMAs differently by the two
// compilers (<= 2 ulp of the larger product): within 2^-20 * (|x1| + |x2|), with a factor 2 to spare. A 16-bit x
// rounds that f32 result once, so the two may land one 16-bit ulp apart. For contrast, __sinf at 131071 rad is
// off by ~1e-2 (its reduction keeps ~22 bits of the argument), which this bound would reject by far.
#include "kernels/rope/rope_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/fp8/fp8.h"
#include "kernels/paged_attention/paged_attention_cuda.h"
#include "kernels/rope/rope.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceArray;
using cuda_test::DeviceVector;
using cuda_test::round_through;
using test_util::random_floats;

struct Case {
  int64_t rows = 1, heads = 1, head_dim = 128, pad = 0;
  DType dtype = DType::kBF16;
  int32_t position_max = 4096;
  bool misaligned = false;
};

double ulp16(DType d, double v) {
  if (d == DType::kF32) return 0.0;
  const int exponent = std::ilogb(std::max(std::fabs(v), 1e-30));
  return std::ldexp(1.0, exponent - (d == DType::kF16 ? 10 : 7));
}

void check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " rows=" + std::to_string(c.rows) + " heads=" +
               std::to_string(c.heads) + " head_dim=" + std::to_string(c.head_dim) + " pad=" + std::to_string(c.pad) +
               " position_max=" + std::to_string(c.position_max) + (c.misaligned ? " misaligned" : ""));
  const int64_t ld = c.heads * c.head_dim + c.pad;
  const std::vector<float> x = round_through(random_floats(c.rows * ld, seed, -2.0f, 2.0f), c.dtype);
  std::mt19937 rng(seed);
  std::vector<int32_t> positions(c.rows);
  for (int32_t& p : positions) p = static_cast<int32_t>(rng() % (static_cast<uint32_t>(c.position_max) + 1));
  positions[0] = c.position_max;
  RopeScaling llama31{"llama3", 8.0, 1.0, 4.0, 8192};
  const std::vector<float> inv = rope_inv_freq(c.head_dim, 500000.0, llama31, 131072);

  std::vector<uint8_t> host = cuda_test::encode(x, c.dtype);
  RopeArgs a;
  a.x = host.data();
  a.dtype = c.dtype;
  a.rows = c.rows;
  a.ld = ld;
  a.heads = c.heads;
  a.head_dim = c.head_dim;
  a.positions = positions.data();
  a.inv_freq = inv.data();
  ASSERT_TRUE(apply_rope(a).ok());
  const std::vector<float> want = cuda_test::decode(host, c.dtype);

  const DeviceArray dx(x, c.dtype, c.misaligned ? 1 : 0);
  const DeviceVector<int32_t> dp(positions);
  const DeviceVector<float> di(inv);
  a.x = dx.data();
  a.positions = dp.get();
  a.inv_freq = di.get();
  const Status status = apply_rope_cuda(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dx.download();
  int bad = 0;
  const int64_t half = c.head_dim / 2;
  for (int64_t r = 0; r < c.rows && bad < 5; ++r) {
    for (int64_t j = 0; j < ld && bad < 5; ++j) {
      const int64_t at = r * ld + j;
      if (j >= c.heads * c.head_dim) {
        if (got[at] != x[at]) {
          ++bad;
          ADD_FAILURE() << "padding written at row " << r << " col " << j;
        }
        continue;
      }
      const int64_t i = j % c.head_dim, base = at - i, k = i % half;
      const double tol = std::ldexp(1.0, -20) * (std::fabs(x[base + k]) + std::fabs(x[base + k + half])) +
                         ulp16(c.dtype, want[at]);
      if (!(std::fabs(static_cast<double>(got[at]) - want[at]) <= tol)) {
        ++bad;
        ADD_FAILURE() << "row " << r << " (position " << positions[r] << ") col " << j << ": gpu " << got[at]
                      << " cpu " << want[at] << " tol " << tol;
      }
    }
  }
}

TEST(RopeCudaTest, DecoderShapesEveryDtype) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    check({7, 32 + 8, 128, 8 * 128, d}, seed += 3);  // Llama-3-8B: q and k of a fused QKV row in one call, v untouched
    check({33, 28 + 4, 128, 4 * 128, d}, seed += 3); // Qwen2.5-7B
    check({3, 5, 64, 0, d}, seed += 3);
    check({5, 3, 10, 4, d}, seed += 3);   // half = 5: scalar packs
    check({5, 3, 12, 2, d}, seed += 3);   // half = 6: pairs (or scalar for f32 with ld odd)
    Case m{9, 8, 128, 0, d};
    m.misaligned = true;
    check(m, seed += 3);
  }
}

TEST(RopeCudaTest, PositionsUpTo131071MatchTheTwin) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType d : {DType::kF32, DType::kBF16}) {
    check({257, 8, 128, 0, d, 131071}, seed += 3);
    check({64, 4, 256, 0, d, 131071}, seed += 3);
  }
}

// apply_rope_and_cache_cuda against the two launches it fuses (apply_rope_cuda, then paged_kv_write_cuda), bit for
// bit on the rotated rows and both whole caches (slots never written keep their bytes, a slot of -1 writes nowhere),
// and against the CPU twin apply_rope_and_cache within the rotation's tolerance: Llama-3-8B's fused QKV row, a
// GQA row with head_dim 64, and rows whose widths force the element-wise copy. With an FP8 pool the caches hold
// codes (one byte an element) quantised with per-pool scales: the fused launch must write paged_kv_write_cuda's
// codes bit for bit (a 16-bit copy into an FP8 pool was the bug of 2026-12-07: the decoder over FP8 pools read
// garbage while every pool kernel passed), v's codes equal the twin's, and k's (rotated one 16-bit ulp apart at
// most) decode within one FP8 step of the twin's.
void check_rope_and_cache(DType d, int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim, int64_t pad,
                          uint32_t seed, PagedKvStorage storage = PagedKvStorage::kSame) {
  SCOPED_TRACE(std::string(dtype_name(d)) + " rows=" + std::to_string(rows) + " q_heads=" + std::to_string(q_heads) +
               " kv_heads=" + std::to_string(kv_heads) + " head_dim=" + std::to_string(head_dim) +
               " pad=" + std::to_string(pad) + " pool " + paged_kv_storage_name(storage));
  const bool fp8 = storage != PagedKvStorage::kSame;
  const Fp8Format format = storage == PagedKvStorage::kFp8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  const int64_t width = kv_heads * head_dim, ld = (q_heads + 2 * kv_heads) * head_dim + pad, slots = 2 * rows + 3;
  const std::vector<float> x = round_through(random_floats(rows * ld, seed, -2.0f, 2.0f), d);
  const std::vector<float> cache0 = round_through(random_floats(slots * width, seed + 1, -1.0f, 1.0f), d);
  std::vector<uint8_t> codes0(static_cast<size_t>(slots * width));
  for (size_t i = 0; i < codes0.size(); ++i) codes0[i] = static_cast<uint8_t>(i * 37 + seed);
  const std::vector<float> scales = {0.0125f, 0.021f};  // k, v: values of |x| <= 2 are well inside E4M3 / E5M2
  std::vector<int32_t> positions(rows), slot(rows);
  std::mt19937 rng(seed);
  for (int64_t r = 0; r < rows; ++r) {
    positions[r] = static_cast<int32_t>(rng() % 8192);
    slot[r] = static_cast<int32_t>(2 * r + 1);
  }
  slot[rows / 2] = -1;
  const std::vector<float> inv = rope_inv_freq(head_dim, 500000.0, RopeScaling{}, 8192);
  const DeviceVector<int32_t> dp(positions), ds(slot);
  const DeviceVector<float> di(inv), dscales(scales);
  // Caches as raw bytes: 16-bit / f32 elements, or FP8 codes.
  using Bytes = std::vector<uint8_t>;
  auto run = [&](bool fused, std::vector<float>* x_out, Bytes* k_out, Bytes* v_out) {
    const DeviceArray dx(x, d, 0);
    const Bytes init = fp8 ? codes0 : cuda_test::encode(cache0, d);
    const DeviceVector<uint8_t> dk(init), dv(init);
    RopeArgs a;
    a.x = dx.data(), a.dtype = d, a.rows = rows, a.ld = ld, a.heads = q_heads + kv_heads, a.head_dim = head_dim;
    a.positions = dp.get(), a.inv_freq = di.get();
    PagedKvWriteArgs w;
    w.k = static_cast<uint8_t*>(dx.data()) + q_heads * head_dim * dtype_size(d);
    w.v = static_cast<uint8_t*>(dx.data()) + (q_heads + kv_heads) * head_dim * dtype_size(d);
    w.src_ld = ld, w.k_cache = dk.get(), w.v_cache = dv.get(), w.dtype = d, w.slot_mapping = ds.get();
    w.num_tokens = rows, w.width = width, w.num_slots = slots;
    w.kv_storage = storage, w.k_scale = dscales.get(), w.v_scale = dscales.get() + 1;
    if (fused) {
      const Status st = apply_rope_and_cache_cuda(a, w, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
    } else {
      ASSERT_TRUE(apply_rope_cuda(a, nullptr).ok());
      ASSERT_TRUE(paged_kv_write_cuda(w, nullptr).ok());
    }
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
    *x_out = dx.download(), *k_out = dk.download(), *v_out = dv.download();
  };
  std::vector<float> fx, ux;
  Bytes fk, fv, uk, uv;
  run(true, &fx, &fk, &fv);
  run(false, &ux, &uk, &uv);
  ASSERT_EQ(fx, ux);
  ASSERT_EQ(fk, uk);
  ASSERT_EQ(fv, uv);
  // The CPU twin on host copies.
  std::vector<uint8_t> hx = cuda_test::encode(x, d);
  Bytes hk = fp8 ? codes0 : cuda_test::encode(cache0, d), hv = hk;
  RopeArgs a;
  a.x = hx.data(), a.dtype = d, a.rows = rows, a.ld = ld, a.heads = q_heads + kv_heads, a.head_dim = head_dim;
  a.positions = positions.data(), a.inv_freq = inv.data();
  PagedKvWriteArgs w;
  w.k = hx.data() + q_heads * head_dim * dtype_size(d);
  w.v = hx.data() + (q_heads + kv_heads) * head_dim * dtype_size(d);
  w.src_ld = ld, w.k_cache = hk.data(), w.v_cache = hv.data(), w.dtype = d, w.slot_mapping = slot.data();
  w.num_tokens = rows, w.width = width, w.num_slots = slots;
  w.kv_storage = storage, w.k_scale = &scales[0], w.v_scale = &scales[1];
  ASSERT_TRUE(apply_rope_and_cache(a, w).ok());
  if (fp8) {
    ASSERT_EQ(fv, hv);
    const double step = format == Fp8Format::kE4M3 ? 0.125 : 0.25;  // an FP8 ulp, relative to the value
    for (size_t i = 0; i < hk.size(); ++i) {
      if (fk[i] == hk[i]) continue;  // also the slots never written, whose bytes may be NaN codes
      const double g = fp8_decode(fk[i], format), c = fp8_decode(hk[i], format);
      ASSERT_LE(std::fabs(g - c), step * std::fabs(c) + 4e-3) << "k code " << i;
    }
    return;
  }
  const std::vector<float> ck = cuda_test::decode(hk, d), cv = cuda_test::decode(hv, d);
  const std::vector<float> gk = cuda_test::decode(fk, d), gv = cuda_test::decode(fv, d);
  for (size_t i = 0; i < ck.size(); ++i) {
    ASSERT_NEAR(gk[i], ck[i], 4 * std::ldexp(1.0, -20) * 4 + ulp16(d, ck[i])) << "k cache element " << i;
    ASSERT_EQ(gv[i], cv[i]) << "v cache element " << i;
  }
}

TEST(RopeCudaTest, RopeAndCacheEqualsRopeThenKvWrite) {
  MMSERVE_REQUIRE_GPU();
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    check_rope_and_cache(d, 5, 32, 8, 128, 0, 11);  // Llama-3-8B
    check_rope_and_cache(d, 9, 32, 8, 64, 0, 12);   // Llama-3.2-1B
    check_rope_and_cache(d, 4, 3, 1, 10, 2, 13);    // odd widths: element-wise copy
    if (HasFatalFailure()) return;
  }
  // Mismatched row counts are refused.
  RopeArgs a;
  PagedKvWriteArgs w;
  a.rows = 2, w.num_tokens = 3;
  EXPECT_FALSE(apply_rope_and_cache_cuda(a, w, nullptr).ok());
}

TEST(RopeCudaTest, RopeAndCacheIntoFp8PoolsWritesTheKvWritesCodes) {
  MMSERVE_REQUIRE_GPU();
  for (PagedKvStorage storage : {PagedKvStorage::kFp8E4M3, PagedKvStorage::kFp8E5M2}) {
    for (DType d : {DType::kF16, DType::kBF16}) {
      check_rope_and_cache(d, 5, 32, 8, 128, 0, 21, storage);  // Llama-3-8B
      check_rope_and_cache(d, 7, 4, 2, 16, 0, 22, storage);    // the tiny fixtures' head_dim 16
      check_rope_and_cache(d, 4, 3, 1, 10, 2, 23, storage);    // odd widths
      if (HasFatalFailure()) return;
    }
  }
}

TEST(RopeCudaTest, BrokenArgumentsAreRejected) {
  MMSERVE_REQUIRE_GPU();
  RopeArgs none;
  none.heads = 1;
  none.head_dim = 2;
  none.ld = 2;
  EXPECT_TRUE(apply_rope_cuda(none, nullptr).ok());  // zero rows
  const DeviceArray dx(random_floats(64, 1), DType::kBF16, 0);
  const DeviceVector<int32_t> dp(std::vector<int32_t>{0});
  const DeviceVector<float> di(std::vector<float>(512, 1.0f));
  RopeArgs a;
  a.x = dx.data();
  a.rows = 1;
  a.ld = 2048;
  a.heads = 1;
  a.head_dim = 2048;  // > 1024
  a.positions = dp.get();
  a.inv_freq = di.get();
  EXPECT_FALSE(apply_rope_cuda(a, nullptr).ok());
  a.head_dim = 64;
  a.ld = 63;
  EXPECT_FALSE(apply_rope_cuda(a, nullptr).ok());
  a.ld = 64;
  a.positions = nullptr;
  EXPECT_FALSE(apply_rope_cuda(a, nullptr).ok());
}

}  // namespace
}  // namespace mmserve::kernels
