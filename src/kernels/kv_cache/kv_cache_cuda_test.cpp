// Tests of the KV-cache CUDA kernels (kv_cache_cuda.h) against their CPU twins, bit for bit: append
// (16-byte and 2-byte paths, positions read on the device, an append captured in a CUDA graph and replayed
// as the positions advance, rows past the capacity dropped), gather (out of place, in place through the
// scratch, element sizes 1/2/4, duplicated indices), quantize_kv (f32/f16/bf16 to FP8 E4M3 and INT8, Whisper's
// cross-attention shape, an all-zero head, stored bytes and scale bits identical to the twin), and the twin's
// f32_to_fp8_e4m3 against CUDA's own __nv_cvt_float_to_fp8 (host build of cuda_fp8.h) over a sweep of floats.
// Every test skips, saying why, without a GPU (the conversion sweep needs none).
#include "kernels/kv_cache/kv_cache_cuda.h"

#include <cuda_fp8.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/kv_cache/kv_cache.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t s = seed * 2654435761u + 1;
  for (uint8_t& b : out) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(s >> 24);
  }
  return out;
}

TEST(Fp8E4M3, MatchesCudaConversion) {
  // Every float whose bits are a multiple of 97 (all exponents, signs and many mantissas), plus the
  // neighbourhoods of every E4M3 value and midpoint.
  int64_t checked = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 97) {
    float x;
    const uint32_t b32 = static_cast<uint32_t>(bits);
    std::memcpy(&x, &b32, 4);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_fp8_e4m3(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) << "x = " << x;
    ++checked;
  }
  for (int code = 0; code < 128; ++code) {
    const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float hi = code < 126 ? fp8_e4m3_to_f32(static_cast<uint8_t>(code + 1)) : 480.0f;
    for (float x : {lo, hi, 0.5f * (lo + hi)}) {
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e9f), -x}) {
        ASSERT_EQ(f32_to_fp8_e4m3(y), __nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3)) << "x = " << y;
      }
    }
  }
  EXPECT_GT(checked, 40000000);
}

TEST(KvCacheCuda, AppendMatchesTwin) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t width : {64 * 3, 5}) {  // 16-byte path, 2-byte path
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " width=" + std::to_string(width));
      const int64_t batch = 4, n = 3, capacity = 9, src_ld = width * 3 + (width == 5 ? 1 : 0);
      const size_t elem = dtype_size(dtype);
      const std::vector<uint8_t> k = random_bytes(static_cast<size_t>(batch * n * src_ld) * elem, 1);
      const std::vector<uint8_t> v = random_bytes(k.size(), 2);
      const std::vector<uint8_t> cache0 = random_bytes(static_cast<size_t>(batch * capacity * width) * elem, 3);
      const std::vector<int32_t> positions = {0, 7, 3, -1};  // batch 1 drops a row; batch 3 drops its first
      std::vector<uint8_t> kc = cache0, vc = cache0;
      KvCacheAppendArgs a;
      a.src_ld = src_ld;
      a.dtype = dtype;
      a.batch = batch;
      a.n = n;
      a.capacity = capacity;
      a.width = width;
      a.k = k.data();
      a.v = v.data();
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.positions = positions.data();
      ASSERT_TRUE(kv_cache_append_cpu(a).ok());
      DeviceVector<uint8_t> dk(k), dv(v), dkc(cache0), dvc(cache0);
      DeviceVector<int32_t> dpos(positions);
      a.k = dk.get();
      a.v = dv.get();
      a.k_cache = dkc.get();
      a.v_cache = dvc.get();
      a.positions = dpos.get();
      ASSERT_TRUE(kv_cache_append(a, nullptr).ok());
      ASSERT_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(dkc.download(), kc);
      EXPECT_EQ(dvc.download(), vc);
    }
  }
}

TEST(KvCacheCuda, AppendReplaysInCudaGraph) {
  MMSERVE_REQUIRE_GPU();
  const int64_t batch = 2, capacity = 6, width = 16;
  std::vector<uint16_t> cache(static_cast<size_t>(batch * capacity * width), 0);
  DeviceVector<uint16_t> dk(static_cast<size_t>(batch * width)), dc(cache);
  DeviceVector<int32_t> dpos(std::vector<int32_t>{0, 0});
  KvCacheAppendArgs a;
  a.k = dk.get();
  a.src_ld = width;
  a.k_cache = dc.get();
  a.dtype = DType::kBF16;
  a.batch = batch;
  a.n = 1;
  a.capacity = capacity;
  a.width = width;
  a.positions = dpos.get();
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status status = kv_cache_append(a, stream);
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.ok()) << status.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int32_t step = 0; step < 4; ++step) {
    const std::vector<uint16_t> row(static_cast<size_t>(batch * width), static_cast<uint16_t>(100 + step));
    const std::vector<int32_t> pos = {step, step + 2};
    ASSERT_CUDA_OK(cudaMemcpyAsync(dk.get(), row.data(), row.size() * 2, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA_OK(cudaMemcpyAsync(dpos.get(), pos.data(), 8, cudaMemcpyHostToDevice, stream));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    for (int64_t b = 0; b < batch; ++b) {
      if (pos[b] < capacity) std::fill_n(cache.begin() + (b * capacity + pos[b]) * width, width, row[0]);
    }
  }
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(dc.download(), cache);
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST(KvCacheCuda, GatherMatchesTwin) {
  MMSERVE_REQUIRE_GPU();
  for (size_t element_bytes : {1u, 2u, 4u}) {
    for (bool in_place : {false, true}) {
      for (int64_t width : {64, 3}) {
        SCOPED_TRACE(std::to_string(element_bytes) + " bytes, width " + std::to_string(width) +
                     (in_place ? ", in place" : ""));
        const int64_t batch = 5, capacity = 7, rows = 5;
        const std::vector<uint8_t> src = random_bytes(static_cast<size_t>(batch * capacity * width) * element_bytes, 4);
        const std::vector<int32_t> index = {4, 4, 0, 2, 1};
        KvCacheGatherArgs a;
        a.element_bytes = element_bytes;
        a.batch = batch;
        a.batch_src = batch;
        a.capacity = capacity;
        a.rows = rows;
        a.width = width;
        std::vector<uint8_t> dst_host = in_place ? src : std::vector<uint8_t>(src.size(), 0xEE);
        std::vector<uint8_t> scratch_host;
        a.src = in_place ? dst_host.data() : src.data();
        a.dst = dst_host.data();
        a.src_index = index.data();
        if (in_place) {
          scratch_host.resize(kv_cache_gather_scratch_bytes(a));
          a.scratch = scratch_host.data();
          a.scratch_bytes = scratch_host.size();
        }
        ASSERT_TRUE(kv_cache_gather_cpu(a).ok());
        DeviceVector<uint8_t> dsrc(src), ddst(in_place ? src : std::vector<uint8_t>(src.size(), 0xEE));
        DeviceVector<uint8_t> dscratch(scratch_host.size());
        DeviceVector<int32_t> dindex(index);
        a.src = in_place ? ddst.get() : dsrc.get();
        a.dst = ddst.get();
        a.scratch = dscratch.get();
        a.src_index = dindex.get();
        ASSERT_TRUE(kv_cache_gather(a, nullptr).ok());
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(ddst.download(), dst_host);
      }
    }
  }
}

TEST(KvCacheCuda, QuantizeMatchesTwinBitForBit) {
  MMSERVE_REQUIRE_GPU();
  struct Shape {
    int64_t batch, rows, heads, head_dim;
  };
  for (const Shape& s : {Shape{2, 1500, 20, 64}, Shape{3, 7, 3, 5}, Shape{1, 1, 1, 4}}) {
    for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (KvStorage storage : {KvStorage::kFp8E4M3, KvStorage::kInt8}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (storage == KvStorage::kInt8 ? " int8" : " fp8") +
                     " rows=" + std::to_string(s.rows) + " heads=" + std::to_string(s.heads));
        const int64_t width = s.heads * s.head_dim, src_ld = 2 * width, dst_ld = width + 3, stride = s.rows + 2;
        std::vector<float> values = random_floats(static_cast<size_t>(s.batch * s.rows * src_ld), 11, -5.0f, 5.0f);
        if (s.heads > 1) {  // head 1 of batch 0 all zeros: scale 0 and zero bytes
          for (int64_t r = 0; r < s.rows; ++r) {
            for (int64_t d = 0; d < s.head_dim; ++d) values[r * src_ld + s.head_dim + d] = 0.0f;
          }
        }
        const std::vector<uint8_t> src = cuda_test::encode(values, dtype);
        std::vector<uint8_t> dst(static_cast<size_t>(s.batch * stride * dst_ld), 0x5A);
        std::vector<float> scale(static_cast<size_t>(s.batch * s.heads), -1.0f);
        QuantizeKvArgs a;
        a.src = src.data();
        a.src_ld = src_ld;
        a.dtype = dtype;
        a.dst = dst.data();
        a.dst_ld = dst_ld;
        a.dst_batch_stride = stride;
        a.storage = storage;
        a.scale = scale.data();
        a.batch = s.batch;
        a.rows = s.rows;
        a.heads = s.heads;
        a.head_dim = s.head_dim;
        ASSERT_TRUE(quantize_kv_cpu(a).ok());
        DeviceVector<uint8_t> dsrc(src), ddst(std::vector<uint8_t>(dst.size(), 0x5A));
        DeviceVector<float> dscale(std::vector<float>(scale.size(), -1.0f));
        a.src = dsrc.get();
        a.dst = ddst.get();
        a.scale = dscale.get();
        ASSERT_TRUE(quantize_kv(a, nullptr).ok());
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        const std::vector<float> got_scale = dscale.download();
        for (size_t i = 0; i < scale.size(); ++i) EXPECT_EQ(bits_from_f32(got_scale[i]), bits_from_f32(scale[i])) << i;
        const std::vector<uint8_t> got = ddst.download();
        size_t mismatches = 0;
        for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != dst[i];
        EXPECT_EQ(mismatches, 0u);
      }
    }
  }
}

TEST(KvCacheCuda, RejectsBadArguments) {
  MMSERVE_REQUIRE_GPU();
  QuantizeKvArgs q;
  q.storage = KvStorage::kSame;
  q.batch = q.heads = 1;
  EXPECT_EQ(quantize_kv(q, nullptr).code(), StatusCode::kInvalidArgument);
  KvCacheGatherArgs g;
  g.element_bytes = 3;
  EXPECT_EQ(kv_cache_gather(g, nullptr).code(), StatusCode::kInvalidArgument);
  KvCacheAppendArgs a;
  a.batch = a.n = a.width = 1;
  a.src_ld = 1;
  EXPECT_EQ(kv_cache_append(a, nullptr).code(), StatusCode::kInvalidArgument);  // null pointers
}

}  // namespace
}  // namespace mmserve::kernels
