// Tests of attention_kv_cuda() against its CPU twin attention_kv_cpu on identical inputs (values rounded
// through the dtype, compressed K/V as the same bytes and scales). Every test skips, saying why, without a
// GPU. Paths covered: the flash-decoding kernel (q_len 1: kv_len 1, 7, 128, 300, 448, 1000, 1500, one launch
// or 2 to 12 splits, head_dim 1..256 odd ones included, every dtype and storage, 16-byte and element loads,
// kv_lengths 0 / partial / full), the tensor-core kernel (f16/bf16, q_len 3..1500, head_dim
// 4/8/20/64/100/128; one and two m-tiles per warp),
// the tiled CUDA-core kernel (f32, and head_dim 160 in bf16), every storage, kv_lengths (0, 1, partial)
// with NaN in the hidden keys, causal (bottom-right aligned), strided rows, a decode step captured in a
// CUDA graph and replayed while the lengths advance, and the errors (small workspace, head_dim > 256,
// bad arguments), and the Hopper wgmma path of long queries at head_dim 64 with strides and masks.
// Tolerance: max |gpu - twin| <= tol * max(max |twin|, max |v|): f32 2e-5 (other summation order, exp2f
// against exp), f16 2e-3 and bf16 2e-2 (P rounded to the dtype before P V and the output rounded:
// <= 2u, see attention_cuda_test.cpp).
#include "kernels/attention/attention_kv_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention/attention_kv.h"
#include "kernels/kv_cache/kv_cache.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

struct GpuKvCase {
  DType dtype = DType::kBF16;
  KvStorage storage = KvStorage::kSame;
  int64_t batch = 2, q_len = 3, kv_len = 7, heads = 2, head_dim = 64;
  bool causal = false;
  std::vector<int32_t> kv_lengths;
  int64_t q_pad = 0, kv_pad = 0, out_pad = 0, capacity_extra = 0;
  int64_t kv_offset = 0;  // elements between the allocation and k (1: misaligned, scalar loads)
  bool shared_kv = false;  // kv_shared: every batch row reads batch 0's K/V

  std::string name() const {
    static const char* kStorage[] = {"same", "fp8", "int8"};
    std::string s = std::string(dtype_name(dtype)) + " " + kStorage[static_cast<int>(storage)] +
                    " b=" + std::to_string(batch) + " q=" + std::to_string(q_len) + " kv=" + std::to_string(kv_len) +
                    " h=" + std::to_string(heads) + " d=" + std::to_string(head_dim);
    if (causal) s += " causal";
    for (int32_t n : kv_lengths) s += " L" + std::to_string(n);
    if (q_pad || kv_pad || out_pad || capacity_extra || kv_offset) s += " strided";
    if (shared_kv) s += " shared-kv";
    return s;
  }
};

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2e-3 : 2e-2;
}

// Host-side inputs of a case: q in the dtype, K/V bytes (hidden keys hold NaN where the storage has one),
// scales.
struct Inputs {
  std::vector<uint8_t> q, k, v;
  std::vector<float> k_scale, v_scale;
  double max_v = 0.0;
};

Inputs make_inputs(const GpuKvCase& c, uint32_t seed) {
  Inputs in;
  const int64_t hidden = c.heads * c.head_dim;
  const int64_t capacity = c.kv_len + c.capacity_extra;
  const int64_t kv_ld = hidden + c.kv_pad;
  in.q = cuda_test::encode(
      random_floats(static_cast<size_t>(c.batch * c.q_len * (hidden + c.q_pad)), seed, -2.0f, 2.0f), c.dtype);
  const size_t n = static_cast<size_t>(c.batch * capacity * kv_ld);
  in.k_scale = random_floats(static_cast<size_t>(c.batch * c.heads), seed + 3, 0.005f, 0.02f);
  in.v_scale = random_floats(static_cast<size_t>(c.batch * c.heads), seed + 4, 0.005f, 0.02f);
  for (int which = 0; which < 2; ++which) {
    const std::vector<float> u =
        random_floats(n, seed + 1 + which, which == 0 ? -2.0f : -1.0f, which == 0 ? 2.0f : 1.0f);
    std::vector<uint8_t> bytes;
    if (c.storage == KvStorage::kSame) {
      bytes = cuda_test::encode(u, c.dtype);
    } else {
      bytes.resize(n);
      for (size_t i = 0; i < n; ++i) {
        if (c.storage == KvStorage::kFp8E4M3) {
          bytes[i] = f32_to_fp8_e4m3(u[i] * 224.0f);
        } else {
          bytes[i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(u[i] * 63.0f)));
        }
      }
    }
    // NaN in every key a row must not read (kv_lengths) and in the padding columns.
    const size_t elem = c.storage == KvStorage::kSame ? dtype_size(c.dtype) : 1;
    std::vector<uint8_t> nan = c.storage == KvStorage::kSame
                                   ? cuda_test::encode({std::numeric_limits<float>::quiet_NaN()}, c.dtype)
                                   : std::vector<uint8_t>{0x7f};
    if (c.storage != KvStorage::kInt8) {
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t L = c.kv_lengths.empty() ? c.kv_len : std::clamp<int64_t>(c.kv_lengths[b], 0, c.kv_len);
        for (int64_t j = 0; j < capacity; ++j) {
          for (int64_t col = 0; col < kv_ld; ++col) {
            if (j < L && col < hidden) continue;
            std::memcpy(bytes.data() + ((b * capacity + j) * kv_ld + col) * elem, nan.data(), elem);
          }
        }
      }
    }
    if (which == 1) {
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t L = c.kv_lengths.empty() ? c.kv_len : std::clamp<int64_t>(c.kv_lengths[b], 0, c.kv_len);
        for (int64_t j = 0; j < L; ++j) {
          for (int64_t col = 0; col < hidden; ++col) {
            const size_t i = static_cast<size_t>((b * capacity + j) * kv_ld + col);
            double x;
            if (c.storage == KvStorage::kSame) {
              x = cuda_test::decode({bytes.begin() + i * elem, bytes.begin() + (i + 1) * elem}, c.dtype)[0];
            } else if (c.storage == KvStorage::kFp8E4M3) {
              x = fp8_e4m3_to_f32(bytes[i]) * in.v_scale[b * c.heads + col / c.head_dim];
            } else {
              x = static_cast<int8_t>(bytes[i]) * in.v_scale[b * c.heads + col / c.head_dim];
            }
            in.max_v = std::max(in.max_v, std::fabs(x));
          }
        }
      }
    }
    (which == 0 ? in.k : in.v) = std::move(bytes);
  }
  return in;
}

AttentionKvArgs make_args(const GpuKvCase& c) {
  AttentionKvArgs a;
  const int64_t hidden = c.heads * c.head_dim;
  a.q_ld = hidden + c.q_pad;
  a.kv_ld = hidden + c.kv_pad;
  a.kv_batch_stride = c.kv_len + c.capacity_extra;
  a.kv_shared = c.shared_kv;
  a.out_ld = hidden + c.out_pad;
  a.dtype = c.dtype;
  a.storage = c.storage;
  a.batch = c.batch;
  a.q_len = c.q_len;
  a.kv_len = c.kv_len;
  a.heads = c.heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.causal = c.causal;
  return a;
}

// The twin's output on the host inputs, as f32 [rows, out_ld] (padding columns 0).
std::vector<float> run_twin(const GpuKvCase& c, const Inputs& in, const std::vector<int32_t>& lengths) {
  AttentionKvArgs a = make_args(c);
  const int64_t rows = c.batch * c.q_len;
  std::vector<uint8_t> out(static_cast<size_t>(rows * a.out_ld) * dtype_size(c.dtype), 0);
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.out = out.data();
  a.k_scale = in.k_scale.data();
  a.v_scale = in.v_scale.data();
  a.kv_lengths = lengths.empty() ? nullptr : lengths.data();
  const Status status = attention_kv_cpu(a);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return cuda_test::decode(out, c.dtype);
}

void compare(const GpuKvCase& c, const std::vector<float>& got, const std::vector<float>& ref, double max_v,
             const std::vector<uint8_t>& out_bytes, const std::vector<uint8_t>& out_init) {
  const int64_t hidden = c.heads * c.head_dim, out_ld = hidden + c.out_pad;
  const size_t elem = dtype_size(c.dtype);
  double worst = 0.0, scale = max_v;
  for (int64_t r = 0; r < c.batch * c.q_len; ++r) {
    for (int64_t col = 0; col < out_ld; ++col) {
      const size_t i = static_cast<size_t>(r * out_ld + col);
      if (col >= hidden) {
        ASSERT_TRUE(
            std::equal(out_bytes.begin() + i * elem, out_bytes.begin() + (i + 1) * elem, out_init.begin() + i * elem))
            << "output padding written, row " << r;
        continue;
      }
      if (ref[i] == 0.0f && got[i] != 0.0f) {
        // rows that see no key are exact zeros on both sides
        bool row_zero = true;
        for (int64_t cc = (col / c.head_dim) * c.head_dim; cc < (col / c.head_dim + 1) * c.head_dim; ++cc) {
          row_zero = row_zero && ref[r * out_ld + cc] == 0.0f;
        }
        ASSERT_FALSE(row_zero && c.head_dim > 2) << "a row that sees no key must be zeros, row " << r;
      }
      const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
      if (!(e <= worst)) worst = e;
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    }
  }
  EXPECT_LE(worst, tolerance(c.dtype) * std::max(scale, 1e-3)) << "max |gpu - twin| " << worst << ", scale " << scale;
}

void check(const GpuKvCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  const Inputs in = make_inputs(c, seed);
  const std::vector<float> ref = run_twin(c, in, c.kv_lengths);
  AttentionKvArgs a = make_args(c);
  const int64_t rows = c.batch * c.q_len;
  const size_t kv_elem = c.storage == KvStorage::kSame ? dtype_size(c.dtype) : 1;
  std::vector<uint8_t> k_bytes(static_cast<size_t>(c.kv_offset) * kv_elem, 0), v_bytes = k_bytes;
  k_bytes.insert(k_bytes.end(), in.k.begin(), in.k.end());
  v_bytes.insert(v_bytes.end(), in.v.begin(), in.v.end());
  const std::vector<uint8_t> out_init =
      cuda_test::encode(std::vector<float>(static_cast<size_t>(rows * a.out_ld), 12345.0f), c.dtype);
  DeviceVector<uint8_t> d_q(in.q), d_k(k_bytes), d_v(v_bytes), d_out(out_init);
  DeviceVector<float> d_ks(in.k_scale), d_vs(in.v_scale);
  DeviceVector<int32_t> d_len(c.kv_lengths);
  const size_t ws_bytes = attention_kv_cuda_workspace_bytes(a);
  DeviceVector<uint8_t> d_ws(ws_bytes);
  a.q = d_q.get();
  a.k = d_k.get() + c.kv_offset * kv_elem;
  a.v = d_v.get() + c.kv_offset * kv_elem;
  a.out = d_out.get();
  a.k_scale = d_ks.get();
  a.v_scale = d_vs.get();
  a.kv_lengths = c.kv_lengths.empty() ? nullptr : d_len.get();
  a.workspace = d_ws.get();
  a.workspace_bytes = ws_bytes;
  ASSERT_TRUE(attention_kv_cuda_supported(a));
  const Status status = attention_kv_cuda(a, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> out_bytes = d_out.download();
  compare(c, cuda_test::decode(out_bytes, c.dtype), ref, in.max_v, out_bytes, out_init);
}

constexpr DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};
constexpr KvStorage kStorages[] = {KvStorage::kSame, KvStorage::kFp8E4M3, KvStorage::kInt8};

TEST(AttentionKvCuda, ShapeSweep) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  int rotate = 0;
  for (int64_t head_dim : {4, 8, 64}) {
    for (int64_t q_len : {1, 3, 448}) {
      for (int64_t kv_len : {1, 7, 1500}) {
        for (int variant = 0; variant < 3; ++variant) {
          GpuKvCase c;
          c.dtype = kDtypes[(rotate + variant) % 3];
          c.storage = kStorages[(rotate / 3 + variant) % 3];
          ++rotate;
          c.head_dim = head_dim;
          c.q_len = q_len;
          c.kv_len = kv_len;
          c.batch = 1 + (seed % 5);
          c.heads = q_len * kv_len > 100000 ? 2 : 3;
          if (q_len * kv_len * c.batch > 1000000) c.batch = 1;
          c.causal = variant == 1;
          if (variant == 2) {
            c.kv_lengths.resize(static_cast<size_t>(c.batch));
            for (int64_t b = 0; b < c.batch; ++b)
              c.kv_lengths[b] = static_cast<int32_t>((kv_len * (b + 1)) / (c.batch + 1));
          }
          check(c, seed++);
        }
      }
    }
  }
}

TEST(AttentionKvCuda, EveryDtypeAndStorage) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (DType dtype : kDtypes) {
    for (KvStorage storage : kStorages) {
      for (int64_t q_len : {1, 37}) {
        GpuKvCase c;
        c.dtype = dtype;
        c.storage = storage;
        c.batch = 5;
        c.q_len = q_len;
        c.kv_len = 300;
        c.heads = 3;
        c.head_dim = 64;
        c.causal = q_len > 1;
        c.kv_lengths = {0, 1, 65, 300, 128};
        check(c, seed++);
      }
    }
  }
}

TEST(AttentionKvCuda, StridesAndOddHeadDims) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 900;
  for (DType dtype : kDtypes) {
    for (int64_t head_dim : {5, 24, 100, 128, 160}) {
      for (int64_t q_len : {1, 20}) {
        GpuKvCase c;
        c.dtype = dtype;
        c.storage = head_dim == 24 ? KvStorage::kFp8E4M3 : KvStorage::kSame;
        c.head_dim = head_dim;
        c.q_len = q_len;
        c.kv_len = 150;
        c.batch = 2;
        c.q_pad = 3;
        c.kv_pad = 5;
        c.out_pad = 1;
        c.capacity_extra = 11;
        c.kv_offset = head_dim == 100 ? 1 : 0;
        c.causal = head_dim == 128;
        check(c, seed++);
      }
    }
  }
}

TEST(AttentionKvCuda, WhisperShapes) {
  MMSERVE_REQUIRE_GPU();
  GpuKvCase enc;  // encoder self-attention at full length (two of large-v3's 20 heads)
  enc.dtype = DType::kBF16;
  enc.batch = 1;
  enc.q_len = enc.kv_len = 1500;
  enc.heads = 2;
  check(enc, 7001);
  enc.dtype = DType::kF16;
  enc.storage = KvStorage::kInt8;
  check(enc, 7002);
  GpuKvCase cross;  // cross-attention of a 448-token prompt and of a decode step, 16 requests, FP8 K/V
  cross.dtype = DType::kF16;
  cross.storage = KvStorage::kFp8E4M3;
  cross.batch = 16;
  cross.heads = 4;
  cross.q_len = 1;
  cross.kv_len = 1500;
  check(cross, 7003);
  cross.batch = 2;
  cross.q_len = 448;
  check(cross, 7004);
}

// The decode kernel (q_len 1) over every dtype x storage x kv_len x head_dim: lane groups of 1 to 32 lanes
// (head_dim 1 with FP8 up to 256 in f32: two 16-byte chunks per lane), 16-byte loads and (odd head_dim, or
// misaligned K/V) element loads, one launch (kv_len <= 512) or split with a combine (batch 1: up to 12 splits),
// and kv_lengths that hide all, some or none of the keys (NaN behind them).
TEST(AttentionKvCuda, DecodeSweep) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 3000;
  int variant = 0;
  for (DType dtype : kDtypes) {
    for (KvStorage storage : kStorages) {
      for (int64_t kv_len : {1, 7, 128, 1500}) {
        for (int64_t head_dim : {1, 5, 20, 33, 64, 100, 128, 256}) {
          GpuKvCase c;
          c.dtype = dtype;
          c.storage = storage;
          c.q_len = 1;
          c.kv_len = kv_len;
          c.head_dim = head_dim;
          c.heads = 2;
          c.batch = 1 + variant % 3;
          c.causal = variant % 2 == 1;  // q_len 1 sees its whole past either way
          if (variant % 4 == 1) {
            c.kv_lengths.resize(static_cast<size_t>(c.batch));
            for (int64_t b = 0; b < c.batch; ++b) {
              c.kv_lengths[b] = static_cast<int32_t>(b == 0 ? kv_len : (kv_len * b) / (c.batch + 1));
            }
          }
          if (variant % 4 == 3) {  // strided rows, a misaligned K/V start (element loads)
            c.q_pad = 3;
            c.kv_pad = 2;
            c.out_pad = 1;
            c.capacity_extra = 5;
            c.kv_offset = 1;
          }
          ++variant;
          check(c, seed++);
        }
      }
    }
  }
}

// Shared K/V (kv_shared): SAM's token-to-image attention as q_len-1 rows (8 to 64 tokens, 8 heads x
// 16, 4096 image keys, split over CTAs), a masked variant, and q_len > 1 (the tiled and tensor-core paths).
TEST(AttentionKvCuda, SharedKv) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 7000;
  for (DType dtype : kDtypes) {
    for (int64_t batch : {8, 64}) {
      GpuKvCase c;
      c.dtype = dtype, c.batch = batch, c.q_len = 1, c.kv_len = 4096, c.heads = 8, c.head_dim = 16;
      c.shared_kv = true;
      check(c, seed++);
    }
    GpuKvCase masked;
    masked.dtype = dtype, masked.batch = 3, masked.q_len = 1, masked.kv_len = 700, masked.head_dim = 32;
    masked.shared_kv = true, masked.kv_lengths = {700, 0, 129};
    check(masked, seed++);
    GpuKvCase rows;
    rows.dtype = dtype, rows.batch = 3, rows.q_len = 20, rows.kv_len = 300, rows.shared_kv = true;
    check(rows, seed++);
  }
}

// Large-v3's decode shapes, 20 heads x 64: the self-attention cache (448 capacity, partly filled) and the
// cross-attention K/V (1500 frames) at batch 1 and 16, in the storages the model uses.
TEST(AttentionKvCuda, WhisperDecodeShapes) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 3900;
  for (int64_t batch : {1, 16}) {
    GpuKvCase self;
    self.dtype = DType::kF16;
    self.batch = batch;
    self.q_len = 1;
    self.kv_len = 448;
    self.heads = 20;
    self.causal = true;
    self.kv_lengths.resize(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) self.kv_lengths[b] = static_cast<int32_t>(4 + 27 * b);
    check(self, seed++);
    for (KvStorage storage : kStorages) {
      GpuKvCase cross;
      cross.dtype = DType::kF16;
      cross.storage = storage;
      cross.batch = batch;
      cross.q_len = 1;
      cross.kv_len = 1500;
      cross.heads = 20;
      check(cross, seed++);
    }
  }
}

// Queries long enough for two m-tiles per warp (q_len >= 512) with masks, odd head dims and compressed K/V.
TEST(AttentionKvCuda, LongQueries) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 8000;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t head_dim : {8, 20, 64}) {
      GpuKvCase c;
      c.dtype = dtype;
      c.storage = head_dim == 20 ? KvStorage::kInt8 : head_dim == 8 ? KvStorage::kFp8E4M3 : KvStorage::kSame;
      c.batch = 2;
      c.heads = 2;
      c.head_dim = head_dim;
      c.q_len = 700;
      c.kv_len = 700;
      c.causal = head_dim != 20;
      if (head_dim == 64) c.kv_lengths = {700, 650};
      if (head_dim == 20) {
        c.kv_lengths = {0, 333};
        c.q_pad = 3;
        c.kv_pad = 1;
      }
      check(c, seed++);
    }
  }
}

// A decode step over a KV cache captured once and replayed while the lengths grow: the split plan and the
// workspace stay fixed, only the device-side kv_lengths change.
TEST(AttentionKvCuda, DecodeStepInCudaGraph) {
  MMSERVE_REQUIRE_GPU();
  GpuKvCase c;
  c.dtype = DType::kBF16;
  c.batch = 3;
  c.q_len = 1;
  c.kv_len = 1000;
  c.heads = 4;
  c.causal = true;
  c.kv_lengths = {1000, 1000, 1000};
  const Inputs in = make_inputs(c, 4242);
  AttentionKvArgs a = make_args(c);
  const int64_t rows = c.batch;
  DeviceVector<uint8_t> d_q(in.q), d_k(in.k), d_v(in.v);
  const std::vector<uint8_t> out_init =
      cuda_test::encode(std::vector<float>(static_cast<size_t>(rows * a.out_ld), 0.0f), c.dtype);
  DeviceVector<uint8_t> d_out(out_init);
  DeviceVector<int32_t> d_len(std::vector<int32_t>{1, 1, 1});
  const size_t ws_bytes = attention_kv_cuda_workspace_bytes(a);
  ASSERT_GT(ws_bytes, 0u) << "batch 3 x 4 heads over 1000 keys should split";
  DeviceVector<uint8_t> d_ws(ws_bytes);
  a.q = d_q.get();
  a.k = d_k.get();
  a.v = d_v.get();
  a.out = d_out.get();
  a.kv_lengths = d_len.get();
  a.workspace = d_ws.get();
  a.workspace_bytes = ws_bytes;
  AttentionKvArgs small = a;
  small.workspace_bytes = ws_bytes - 1;
  EXPECT_EQ(attention_kv_cuda(small, nullptr).code(), StatusCode::kInvalidArgument);

  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status status = attention_kv_cuda(a, stream);
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.ok()) << status.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int32_t>& lengths :
       {std::vector<int32_t>{1, 2, 3}, std::vector<int32_t>{64, 65, 200}, std::vector<int32_t>{999, 0, 1000}}) {
    SCOPED_TRACE("lengths " + std::to_string(lengths[0]) + "," + std::to_string(lengths[1]) + "," +
                 std::to_string(lengths[2]));
    ASSERT_CUDA_OK(cudaMemcpyAsync(d_len.get(), lengths.data(), 12, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<uint8_t> out_bytes = d_out.download();
    GpuKvCase with = c;
    with.kv_lengths = lengths;
    compare(with, cuda_test::decode(out_bytes, c.dtype), run_twin(c, in, lengths), in.max_v, out_bytes, out_init);
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST(AttentionKvCuda, Errors) {
  MMSERVE_REQUIRE_GPU();
  GpuKvCase c;
  c.head_dim = 300;
  AttentionKvArgs a = make_args(c);
  DeviceVector<uint8_t> buf(1 << 16);
  a.q = a.k = a.v = buf.get();
  a.out = buf.get();
  EXPECT_FALSE(attention_kv_cuda_supported(a));
  EXPECT_EQ(attention_kv_cuda(a, nullptr).code(), StatusCode::kUnimplemented);
  a.head_dim = 64;
  a.q_ld = a.kv_ld = a.out_ld = 128;
  a.storage = KvStorage::kFp8E4M3;  // scales missing
  EXPECT_EQ(attention_kv_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.storage = KvStorage::kSame;
  a.kv_ld = 100;
  EXPECT_EQ(attention_kv_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.batch = 0;  // empty: nothing launched
  EXPECT_TRUE(attention_kv_cuda(a, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

// The Hopper (wgmma) path of long queries at head_dim 64 with f16/bf16 K/V: padded rows (still 16-byte
// aligned, so the path is taken), an odd output stride (element stores), a KV cache with spare capacity,
// kv_lengths that end mid-tile, causal and not, several 128-row CTAs with a partial last one.
TEST(AttentionKvCuda, LongQueriesStridedHopperPath) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 8100;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool causal : {false, true}) {
      GpuKvCase c;
      c.dtype = dtype;
      c.batch = 3;
      c.heads = 2;
      c.head_dim = 64;
      c.q_len = 600;
      c.kv_len = 650;
      c.causal = causal;
      c.kv_lengths = {650, 601, 37};
      c.q_pad = 8;
      c.kv_pad = 16;
      c.out_pad = 1;
      c.capacity_extra = 5;
      check(c, seed++);
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
