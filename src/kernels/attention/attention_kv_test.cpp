// Tests of attention_kv_cpu (the CPU twin of attention_kv_cuda) against a naive double-precision loop
// written here from the contract in attention_kv.h: every storage (same dtype, FP8 E4M3, INT8 with
// per-(batch, head) scales), q/out f32/f16/bf16, head_dim 4/8/64, q_len 1/3/40, kv_len 1/7/200, batch 1..5,
// kv_lengths (0, 1, partial, full) with NaN in the hidden keys, causal (bottom-right aligned with q_len >
// L_b too), strided rows (fused K/V column slices, cache capacity > kv_len), and the argument checks.
// Tolerance: max |twin - ref| <= tol * max(max |ref|, max |v|), tol 2e-5 for f32 out (f32 sums of at most a
// few hundred terms) and two units of the output's rounding for f16 (2^-10) and bf16 (2^-7).
#include "kernels/attention/attention_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kv_cache/kv_cache.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using test_util::random_floats;

struct KvCase {
  DType dtype = DType::kF32;
  KvStorage storage = KvStorage::kSame;
  int64_t batch = 2, q_len = 3, kv_len = 7, heads = 2, head_dim = 8;
  bool causal = false;
  std::vector<int32_t> kv_lengths;
  int64_t q_pad = 0, kv_pad = 0, out_pad = 0, capacity_extra = 0;

  std::string name() const {
    std::string s = std::string(dtype_name(dtype)) + " storage=" + std::to_string(static_cast<int>(storage)) +
                    " b=" + std::to_string(batch) + " q=" + std::to_string(q_len) + " kv=" + std::to_string(kv_len) +
                    " h=" + std::to_string(heads) + " d=" + std::to_string(head_dim);
    if (causal) s += " causal";
    for (int32_t n : kv_lengths) s += " L" + std::to_string(n);
    return s;
  }
};

std::vector<uint8_t> encode_floats(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> decode_floats(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  convert_to_f32(dtype, bytes.data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

// Random K/V storage bytes: for kSame the dtype's encoding of values in [-1, 1]; FP8 any finite code; INT8
// any value in [-127, 127]. NaN goes into the hidden keys (kSame and FP8 only: INT8 has no NaN).
std::vector<uint8_t> random_kv(const KvCase& c, int64_t rows_total, int64_t ld, uint32_t seed) {
  const std::vector<float> u = random_floats(static_cast<size_t>(rows_total * ld), seed, -1.0f, 1.0f);
  if (c.storage == KvStorage::kSame) return encode_floats(u, c.dtype);
  std::vector<uint8_t> bytes(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    if (c.storage == KvStorage::kFp8E4M3) {
      uint8_t code = static_cast<uint8_t>(static_cast<int>((u[i] + 1.0f) * 127.99f));
      if ((code & 0x7f) == 0x7f) code ^= 1;
      bytes[i] = code;
    } else {
      bytes[i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(u[i] * 127.0f)));
    }
  }
  return bytes;
}

double kv_value(const KvCase& c, const std::vector<uint8_t>& bytes, int64_t index) {
  switch (c.storage) {
    case KvStorage::kFp8E4M3: return fp8_e4m3_to_f32(bytes[index]);
    case KvStorage::kInt8: return static_cast<int8_t>(bytes[index]);
    default: {
      float f;
      if (c.dtype == DType::kF32) {
        std::memcpy(&f, bytes.data() + 4 * index, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * index, 2);
        f = c.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return f;
    }
  }
}

void poison_hidden(const KvCase& c, std::vector<uint8_t>& bytes, int64_t capacity, int64_t ld) {
  if (c.storage == KvStorage::kInt8) return;
  const size_t elem = c.storage == KvStorage::kSame ? dtype_size(c.dtype) : 1;
  const std::vector<uint8_t> nan = c.storage == KvStorage::kSame
                                       ? encode_floats({std::numeric_limits<float>::quiet_NaN()}, c.dtype)
                                       : std::vector<uint8_t>{0x7f};
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t L = c.kv_lengths.empty() ? c.kv_len : std::clamp<int64_t>(c.kv_lengths[b], 0, c.kv_len);
    for (int64_t j = L; j < capacity; ++j) {
      for (int64_t col = 0; col < ld; ++col) {
        std::memcpy(bytes.data() + ((b * capacity + j) * ld + col) * elem, nan.data(), elem);
      }
    }
  }
}

void check(const KvCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  const int64_t hidden = c.heads * c.head_dim;
  const int64_t q_ld = hidden + c.q_pad, kv_ld = hidden + c.kv_pad, out_ld = hidden + c.out_pad;
  const int64_t capacity = c.kv_len + c.capacity_extra;
  const int64_t q_rows = c.batch * c.q_len;
  const std::vector<float> q_f = random_floats(static_cast<size_t>(q_rows * q_ld), seed, -2.0f, 2.0f);
  const std::vector<uint8_t> q_bytes = encode_floats(q_f, c.dtype);
  const std::vector<float> q = decode_floats(q_bytes, c.dtype);
  std::vector<uint8_t> k = random_kv(c, c.batch * capacity, kv_ld, seed + 1);
  std::vector<uint8_t> v = random_kv(c, c.batch * capacity, kv_ld, seed + 2);
  const std::vector<uint8_t> k_clean = k, v_clean = v;
  poison_hidden(c, k, capacity, kv_ld);
  poison_hidden(c, v, capacity, kv_ld);
  std::vector<float> k_scale = random_floats(static_cast<size_t>(c.batch * c.heads), seed + 3, 0.005f, 0.02f);
  std::vector<float> v_scale = random_floats(static_cast<size_t>(c.batch * c.heads), seed + 4, 0.005f, 0.02f);
  if (c.storage == KvStorage::kFp8E4M3) {  // FP8 codes span +-448: bring scores to a few units
    for (float& s : k_scale) s *= 0.01f;
    for (float& s : v_scale) s *= 0.01f;
  }
  std::vector<uint8_t> out(static_cast<size_t>(q_rows * out_ld) * dtype_size(c.dtype), 0xAB);
  const std::vector<uint8_t> out_init = out;

  AttentionKvArgs a;
  a.q = q_bytes.data();
  a.q_ld = q_ld;
  a.k = k.data();
  a.v = v.data();
  a.kv_ld = kv_ld;
  a.kv_batch_stride = capacity;
  a.out = out.data();
  a.out_ld = out_ld;
  a.dtype = c.dtype;
  a.storage = c.storage;
  a.k_scale = c.storage == KvStorage::kSame ? nullptr : k_scale.data();
  a.v_scale = c.storage == KvStorage::kSame ? nullptr : v_scale.data();
  a.batch = c.batch;
  a.q_len = c.q_len;
  a.kv_len = c.kv_len;
  a.heads = c.heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.kv_lengths = c.kv_lengths.empty() ? nullptr : c.kv_lengths.data();
  a.causal = c.causal;
  const Status status = attention_kv_cpu(a);
  ASSERT_TRUE(status.ok()) << status.to_string();

  // The naive reference, in double, straight from the contract.
  const std::vector<float> got_all = decode_floats(out, c.dtype);
  double worst = 0.0, scale = 0.0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t L = c.kv_lengths.empty() ? c.kv_len : std::clamp<int64_t>(c.kv_lengths[b], 0, c.kv_len);
    for (int64_t h = 0; h < c.heads; ++h) {
      const double ks = c.storage == KvStorage::kSame ? 1.0 : k_scale[b * c.heads + h];
      const double vs = c.storage == KvStorage::kSame ? 1.0 : v_scale[b * c.heads + h];
      for (int64_t i = 0; i < c.q_len; ++i) {
        std::vector<double> w;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < L; ++j) {
          if (c.causal && j > L - c.q_len + i) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < c.head_dim; ++d) {
            dot += static_cast<double>(q[(b * c.q_len + i) * q_ld + h * c.head_dim + d]) * ks *
                   kv_value(c, k_clean, (b * capacity + j) * kv_ld + h * c.head_dim + d);
          }
          w.push_back(dot * a.scale);
          keys.push_back(j);
        }
        double mx = -std::numeric_limits<double>::infinity(), sum = 0.0;
        for (double x : w) mx = std::max(mx, x);
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < c.head_dim; ++d) {
          double ref = 0.0;
          for (size_t t = 0; t < keys.size(); ++t) {
            const double vv = vs * kv_value(c, v_clean, (b * capacity + keys[t]) * kv_ld + h * c.head_dim + d);
            ref += w[t] / sum * vv;
            scale = std::max(scale, std::fabs(vv));
          }
          const double got = got_all[(b * c.q_len + i) * out_ld + h * c.head_dim + d];
          if (keys.empty()) {
            ASSERT_EQ(got, 0.0) << "a row that sees no key must be zeros (b=" << b << " i=" << i << ")";
          }
          const double e = std::fabs(got - ref);
          if (!(e <= worst)) worst = e;  // NaN -> worst becomes NaN and fails below
          scale = std::max(scale, std::fabs(ref));
        }
      }
    }
  }
  const double tol = c.dtype == DType::kF32 ? 2e-5 : c.dtype == DType::kF16 ? 1.0 / 1024 : 1.0 / 128;
  EXPECT_LE(worst, tol * std::max(scale, 1e-3));
  // Columns past hidden in each output row are untouched.
  const size_t elem = dtype_size(c.dtype);
  for (int64_t r = 0; r < q_rows; ++r) {
    for (size_t byte = (r * out_ld + hidden) * elem; byte < static_cast<size_t>((r + 1) * out_ld) * elem; ++byte) {
      ASSERT_EQ(out[byte], out_init[byte]) << "output padding of row " << r << " written";
    }
  }
}

TEST(AttentionKvCpu, ShapesDtypesStorages) {
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (KvStorage storage : {KvStorage::kSame, KvStorage::kFp8E4M3, KvStorage::kInt8}) {
      for (int64_t head_dim : {4, 8, 64}) {
        for (int64_t q_len : {1, 3}) {
          for (int64_t kv_len : {1, 7, 200}) {
            KvCase c;
            c.dtype = dtype;
            c.storage = storage;
            c.head_dim = head_dim;
            c.q_len = q_len;
            c.kv_len = kv_len;
            c.batch = 1 + (seed % 3);
            c.heads = head_dim == 64 ? 2 : 3;
            check(c, seed++);
          }
        }
      }
    }
  }
}

TEST(AttentionKvCpu, MasksAndStrides) {
  uint32_t seed = 100;
  for (KvStorage storage : {KvStorage::kSame, KvStorage::kFp8E4M3, KvStorage::kInt8}) {
    for (bool causal : {false, true}) {
      KvCase c;
      c.storage = storage;
      c.batch = 5;
      c.q_len = 4;
      c.kv_len = 70;
      c.heads = 3;
      c.head_dim = 8;
      c.causal = causal;
      c.kv_lengths = {0, 1, 3, 70, 65};  // 3 < q_len: with causal the first rows see nothing
      c.q_pad = 5;
      c.kv_pad = 3;
      c.out_pad = 2;
      c.capacity_extra = 9;
      check(c, seed++);
      c.dtype = DType::kBF16;
      check(c, seed++);
    }
  }
  KvCase longer;  // cross-attention-like: 40 queries against 300 keys, causal off
  longer.q_len = 40;
  longer.kv_len = 300;
  longer.head_dim = 64;
  longer.dtype = DType::kF16;
  check(longer, seed++);
  longer.causal = true;  // a decoder prompt of 40 tokens over a 300-row cache
  check(longer, seed++);
}

// kv_shared: every batch row reads batch 0's K/V, exactly as if each row had its own copy.
TEST(AttentionKvCpu, SharedKvEqualsCopiedKv) {
  const int64_t batch = 5, kv_len = 37, heads = 3, head_dim = 16, hidden = heads * head_dim;
  const std::vector<float> q = random_floats(static_cast<size_t>(batch * hidden), 7, -1.0f, 1.0f);
  const std::vector<float> k = random_floats(static_cast<size_t>(kv_len * hidden), 8, -1.0f, 1.0f);
  const std::vector<float> v = random_floats(static_cast<size_t>(kv_len * hidden), 9, -1.0f, 1.0f);
  std::vector<float> k_copies, v_copies;
  for (int64_t b = 0; b < batch; ++b) {
    k_copies.insert(k_copies.end(), k.begin(), k.end());
    v_copies.insert(v_copies.end(), v.begin(), v.end());
  }
  const std::vector<int32_t> lengths = {37, 0, 5, 36, 37};
  for (bool masked : {false, true}) {
    std::vector<float> shared(static_cast<size_t>(batch * hidden)), copied = shared;
    AttentionKvArgs a;
    a.q = q.data(), a.q_ld = hidden, a.k = k.data(), a.v = v.data(), a.kv_ld = hidden, a.kv_shared = true;
    a.out = shared.data(), a.out_ld = hidden, a.dtype = DType::kF32, a.batch = batch, a.q_len = 1;
    a.kv_len = kv_len, a.heads = heads, a.head_dim = head_dim, a.scale = 0.25f;
    a.kv_lengths = masked ? lengths.data() : nullptr;
    ASSERT_TRUE(attention_kv_cpu(a).ok());
    a.k = k_copies.data(), a.v = v_copies.data(), a.kv_shared = false, a.kv_batch_stride = kv_len;
    a.out = copied.data();
    ASSERT_TRUE(attention_kv_cpu(a).ok());
    EXPECT_EQ(shared, copied);
  }
}

// Grouped-query attention (K/V with fewer heads than q, query head h reading K/V head h / group) and Mistral's
// sliding window (query i sees keys (p_i - window, p_i], p_i = L - q_len + i), against a naive double loop
// straight from the contract; with kv_lengths, a prefill (q_len > 1) and a decode step (q_len 1).
TEST(AttentionKvCpu, GroupedQueryHeadsAndSlidingWindow) {
  const int64_t batch = 3, heads = 6, head_dim = 8, kv_len = 45;
  const std::vector<int32_t> lengths = {45, 9, 30};
  for (int64_t kv_heads : {6, 3, 2, 1}) {
    for (int64_t window : {0, 1, 4, 100}) {
      for (int64_t q_len : {1, 7}) {
        SCOPED_TRACE("kv_heads=" + std::to_string(kv_heads) + " window=" + std::to_string(window) +
                     " q_len=" + std::to_string(q_len));
        const int64_t hq = heads * head_dim, hkv = kv_heads * head_dim;
        const std::vector<float> q = random_floats(static_cast<size_t>(batch * q_len * hq), 11, -1.0f, 1.0f);
        const std::vector<float> k = random_floats(static_cast<size_t>(batch * kv_len * hkv), 12, -1.0f, 1.0f);
        const std::vector<float> v = random_floats(static_cast<size_t>(batch * kv_len * hkv), 13, -1.0f, 1.0f);
        std::vector<float> out(static_cast<size_t>(batch * q_len * hq), 7.0f);
        AttentionKvArgs a;
        a.q = q.data(), a.q_ld = hq, a.k = k.data(), a.v = v.data(), a.kv_ld = hkv, a.kv_batch_stride = kv_len;
        a.out = out.data(), a.out_ld = hq, a.dtype = DType::kF32, a.batch = batch, a.q_len = q_len;
        a.kv_len = kv_len, a.heads = heads, a.head_dim = head_dim, a.scale = 0.3f, a.kv_lengths = lengths.data();
        a.causal = true, a.window = window, a.kv_heads = kv_heads == heads ? 0 : kv_heads;
        const Status status = attention_kv_cpu(a);
        ASSERT_TRUE(status.ok()) << status.to_string();
        const int64_t group = heads / kv_heads;
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t L = lengths[b];
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t i = 0; i < q_len; ++i) {
              const int64_t pos = L - q_len + i;
              std::vector<double> w;
              std::vector<int64_t> keys;
              for (int64_t j = 0; j < L; ++j) {
                if (j > pos || (window > 0 && j <= pos - window)) continue;
                double dot = 0;
                for (int64_t d = 0; d < head_dim; ++d) {
                  dot += double{q[(b * q_len + i) * hq + h * head_dim + d]} *
                         k[(b * kv_len + j) * hkv + (h / group) * head_dim + d];
                }
                w.push_back(dot * 0.3);
                keys.push_back(j);
              }
              double mx = -1e300, sum = 0;
              for (double x : w) mx = std::max(mx, x);
              for (double& x : w) sum += (x = std::exp(x - mx));
              for (int64_t d = 0; d < head_dim; ++d) {
                double ref = 0;
                for (size_t t = 0; t < keys.size(); ++t) {
                  ref += w[t] / sum * v[(b * kv_len + keys[t]) * hkv + (h / group) * head_dim + d];
                }
                EXPECT_NEAR(out[(b * q_len + i) * hq + h * head_dim + d], ref, 2e-5) << b << " " << h << " " << i;
              }
            }
          }
        }
      }
    }
  }
  AttentionKvArgs bad;
  float buf[64] = {};
  bad.q = buf, bad.k = buf, bad.v = buf, bad.out = buf, bad.q_ld = bad.kv_ld = bad.out_ld = 8;
  bad.kv_batch_stride = 1, bad.dtype = DType::kF32, bad.batch = 1, bad.q_len = 1, bad.kv_len = 1, bad.heads = 4;
  bad.head_dim = 2, bad.kv_heads = 3;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);  // 4 heads over 3 K/V heads
  bad.kv_heads = 0, bad.window = 2;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);  // a window without causal
}

TEST(AttentionKvCpu, RejectsBadArguments) {
  float buf[64] = {};
  AttentionKvArgs a;
  a.q = buf;
  a.k = buf;
  a.v = buf;
  a.out = buf;
  a.dtype = DType::kF32;
  a.batch = 1;
  a.q_len = 1;
  a.kv_len = 2;
  a.heads = 2;
  a.head_dim = 4;
  a.q_ld = a.kv_ld = a.out_ld = 8;
  a.kv_batch_stride = 2;
  EXPECT_TRUE(attention_kv_cpu(a).ok());
  AttentionKvArgs bad = a;
  bad.q_ld = 7;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.kv_batch_stride = 1;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.storage = KvStorage::kInt8;  // no scales
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.dtype = DType::kI32;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.heads = 0;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.k = nullptr;
  EXPECT_EQ(attention_kv_cpu(bad).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.batch = 0;  // empty: nothing to do
  bad.q = nullptr;
  EXPECT_TRUE(attention_kv_cpu(bad).ok());
}

}  // namespace
}  // namespace mmserve::kernels
