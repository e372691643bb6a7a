// Tests of attention_cuda() against its CPU twin kernels::attention (f32), run on the very inputs the GPU
// sees (random values rounded through the dtype). Every test skips, saying why, without a GPU.
//
// Cases: dtypes bf16/f16/f32 x head_dim (multiples of 16 up to 128, and odd ones that take the padded,
// scalar-load path); seq 1, 7, 50 (ViT-B/32), 77 (text), 197, 257 (ViT-L/14) and the largest supported;
// heads 1/3/12 x batch 1/2/5; causal; kv_lengths shorter than seq (0, 1, across the 64-key block edge) with
// NaN in the padded keys and values (never read); qkv_ld / out_ld past the minimum, aligned and not, and a
// misaligned base pointer (scalar path); large grids with mixed lengths; launches captured in a CUDA
// graph; unsupported shapes (kUnimplemented) and bad arguments (kInvalidArgument); empty batches.
//
// Tolerances, as max |gpu - cpu| <= tol * scale with scale = max(max |ref|, max |v|): both sides start from
// identical inputs, so the difference is what the GPU rounds along the way plus summation order.
//  - f16 / bf16: P (in [0, 1]) is rounded to the input type before P V, each weight off by at most the unit
//    roundoff u relative, so an output moves by at most u * sum_j w_j |v_j| <= u * max |v|; the output is
//    rounded to the dtype once more (<= u * |out|). Together <= 2u * scale: u = 2^-11 for f16 (bound
//    9.8e-4, tol 2e-3) and 2^-8 for bf16 (bound 7.8e-3, tol 2e-2). f32 accumulation adds ~1e-6.
//  - f32: the same arithmetic in another order (and expf against the twin's exp), a few ulp per term over
//    at most a few hundred terms: tol 1e-5.
#include "kernels/attention/attention_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/attention/attention.h"
#include "kernels/testing/cuda_test_util.h"
#include "kernels/testing/kernel_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using test_util::random_floats;

constexpr DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};

struct CudaAttentionCase {
  DType dtype = DType::kBF16;
  int64_t batch = 2, seq = 7, heads = 3, head_dim = 64;
  bool causal = false;
  std::vector<int32_t> kv_lengths;  // empty: no padding mask
  int64_t qkv_pad = 0;              // extra columns after 3 * hidden in each qkv row
  int64_t out_pad = 0;              // extra columns after hidden in each output row (must keep their bytes)
  int64_t qkv_offset = 0;           // elements between the allocation and the qkv pointer (1: misaligned)
  bool graph = false;               // capture the launch in a CUDA graph and replay it

  std::string name() const {
    std::string s = std::string(dtype_name(dtype)) + " batch=" + std::to_string(batch) + " seq=" + std::to_string(seq) +
                    " heads=" + std::to_string(heads) + " head_dim=" + std::to_string(head_dim);
    if (causal) s += " causal";
    if (!kv_lengths.empty()) {
      s += " kv_lengths=";
      for (int32_t n : kv_lengths) s += std::to_string(n) + ",";
    }
    if (qkv_pad || out_pad || qkv_offset) {
      s += " qkv_pad=" + std::to_string(qkv_pad) + " out_pad=" + std::to_string(out_pad) +
           " qkv_offset=" + std::to_string(qkv_offset);
    }
    if (graph) s += " graph";
    return s;
  }
};

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1e-5;
    case DType::kF16: return 2e-3;
    default: return 2e-2;
  }
}

// Runs the case on the GPU and on the CPU twin and compares them.
void check_case(const CudaAttentionCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  const int64_t hidden = c.heads * c.head_dim;
  const int64_t qkv_ld = 3 * hidden + c.qkv_pad;
  const int64_t out_ld = hidden + c.out_pad;
  const int64_t rows = c.batch * c.seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const float nan = std::numeric_limits<float>::quiet_NaN();

  // q and k in [-2, 2] (scores spread over a few units: softmax neither flat nor one-hot), v in [-1, 1];
  // columns past 3 * hidden and the keys/values past kv_lengths hold NaN, which must never be read.
  std::vector<float> qkv = random_floats(static_cast<size_t>(rows * qkv_ld), seed, -2.0f, 2.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = qkv.data() + r * qkv_ld;
    for (int64_t col = 2 * hidden; col < 3 * hidden; ++col) row[col] *= 0.5f;
    for (int64_t col = 3 * hidden; col < qkv_ld; ++col) row[col] = nan;
  }
  for (int64_t b = 0; b < static_cast<int64_t>(c.kv_lengths.size()); ++b) {
    for (int64_t j = c.kv_lengths[b]; j < c.seq; ++j) {
      float* row = qkv.data() + (b * c.seq + j) * qkv_ld;
      std::fill(row + hidden, row + 3 * hidden, nan);
    }
  }
  qkv = cuda_test::round_through(qkv, c.dtype);
  double max_v = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 2 * hidden; col < 3 * hidden; ++col) {
      const float x = qkv[r * qkv_ld + col];
      if (!std::isnan(x)) max_v = std::max(max_v, std::fabs(static_cast<double>(x)));
    }
  }

  // The CPU twin on the rounded inputs.
  std::vector<float> ref(static_cast<size_t>(rows * hidden), 0.0f);
  {
    const Tensor fused(qkv.data(), DType::kF32, {c.batch, c.seq, qkv_ld});
    Tensor out(ref.data(), DType::kF32, {c.batch, c.seq, hidden});
    AttentionMask mask;
    mask.causal = c.causal;
    mask.kv_lengths = c.kv_lengths.empty() ? nullptr : c.kv_lengths.data();
    attention(fused.slice_cols(0, hidden), fused.slice_cols(hidden, 2 * hidden),
              fused.slice_cols(2 * hidden, 3 * hidden), out, c.heads, scale, mask);
  }

  // The GPU, on the same values in the dtype; the output starts as a sentinel everywhere.
  const size_t elem = dtype_size(c.dtype);
  std::vector<uint8_t> in_bytes(static_cast<size_t>(c.qkv_offset) * elem, 0);
  const std::vector<uint8_t> qkv_bytes = cuda_test::encode(qkv, c.dtype);
  in_bytes.insert(in_bytes.end(), qkv_bytes.begin(), qkv_bytes.end());
  const std::vector<uint8_t> out_init =
      cuda_test::encode(std::vector<float>(static_cast<size_t>(rows * out_ld), 12345.0f), c.dtype);
  DeviceVector<uint8_t> d_qkv(in_bytes);
  DeviceVector<uint8_t> d_out(out_init);
  DeviceVector<int32_t> d_lengths(c.kv_lengths);
  ASSERT_TRUE(rows == 0 || (d_qkv.get() != nullptr && d_out.get() != nullptr)) << "cudaMalloc failed";

  AttentionCudaArgs args;
  args.qkv = d_qkv.get() + c.qkv_offset * elem;
  args.qkv_ld = qkv_ld;
  args.out = d_out.get();
  args.out_ld = out_ld;
  args.dtype = c.dtype;
  args.batch = c.batch;
  args.seq = c.seq;
  args.heads = c.heads;
  args.head_dim = c.head_dim;
  args.scale = scale;
  args.causal = c.causal;
  args.kv_lengths = c.kv_lengths.empty() ? nullptr : d_lengths.get();

  if (c.graph) {
    cudaStream_t stream;
    ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const Status status = attention_cuda(args, stream);
    ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
    ASSERT_TRUE(status.ok()) << status.to_string();
    cudaGraphExec_t exec = nullptr;
    ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));  // a replay writes the same values
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
    ASSERT_CUDA_OK(cudaGraphDestroy(graph));
    ASSERT_CUDA_OK(cudaStreamDestroy(stream));
  } else {
    const Status status = attention_cuda(args, nullptr);
    ASSERT_TRUE(status.ok()) << status.to_string();
    ASSERT_CUDA_OK(cudaDeviceSynchronize());
  }
  ASSERT_CUDA_OK(cudaGetLastError());

  const std::vector<uint8_t> out_bytes = d_out.download();
  ASSERT_EQ(out_bytes.size(), out_init.size());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t pad_begin = static_cast<size_t>((r * out_ld + hidden) * elem);
    const size_t pad_end = static_cast<size_t>((r + 1) * out_ld * elem);
    ASSERT_TRUE(std::equal(out_bytes.begin() + pad_begin, out_bytes.begin() + pad_end, out_init.begin() + pad_begin))
        << "output padding of row " << r << " was written";
  }
  const std::vector<float> out_all = cuda_test::decode(out_bytes, c.dtype);
  std::vector<float> got(ref.size());
  std::vector<double> ref_d(ref.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 0; col < hidden; ++col) {
      got[r * hidden + col] = out_all[r * out_ld + col];
      ref_d[r * hidden + col] = ref[r * hidden + col];
    }
  }
  // A batch row with no visible key (kv_lengths 0) must come out as exact zeros.
  for (int64_t b = 0; b < static_cast<int64_t>(c.kv_lengths.size()); ++b) {
    if (c.kv_lengths[b] != 0) continue;
    for (int64_t i = 0; i < c.seq; ++i) {
      for (int64_t col = 0; col < hidden; ++col) {
        ASSERT_EQ(got[(b * c.seq + i) * hidden + col], 0.0f) << "masked row b=" << b << " i=" << i;
      }
    }
  }
  const double value_scale = std::max(test_util::max_abs(ref_d), max_v);
  const double error = test_util::max_abs_error(got, ref_d);
  EXPECT_LE(error, tolerance(c.dtype) * value_scale)
      << "max |gpu - cpu| " << error << ", value scale " << value_scale << ", tol " << tolerance(c.dtype);
}

TEST(AttentionCudaTest, DtypesByHeadDims) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  for (DType dtype : kDtypes) {
    // Multiples of 16 take the exact tile; the others are zero-padded (8, 40: 16-byte loads; 1, 20: scalar).
    for (int64_t head_dim : {16, 32, 64, 80, 96, 112, 128, 1, 8, 20, 40}) {
      for (int64_t seq : {7, 50}) {
        CudaAttentionCase c;
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.seq = seq;
        check_case(c, seed++);
      }
    }
  }
}

TEST(AttentionCudaTest, SequenceLengths) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType dtype : kDtypes) {
    for (int64_t seq : {1, 7, 50, 64, 65, 77, 197, 257}) {
      CudaAttentionCase c;
      c.dtype = dtype;
      c.seq = seq;
      c.heads = 12;
      check_case(c, seed++);
    }
  }
}

TEST(AttentionCudaTest, HeadsByBatch) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dtype : kDtypes) {
    for (int64_t heads : {1, 3, 12}) {
      for (int64_t batch : {1, 2, 5}) {
        CudaAttentionCase c;
        c.dtype = dtype;
        c.heads = heads;
        c.batch = batch;
        c.seq = 50;
        check_case(c, seed++);
      }
    }
  }
}

TEST(AttentionCudaTest, Causal) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 300;
  for (DType dtype : kDtypes) {
    for (int64_t seq : {1, 7, 50, 77, 130, 197, 257}) {
      for (int64_t head_dim : {64, 80}) {
        CudaAttentionCase c;
        c.dtype = dtype;
        c.seq = seq;
        c.head_dim = head_dim;
        c.causal = true;
        check_case(c, seed++);
      }
    }
  }
}

TEST(AttentionCudaTest, KvLengthsShorterThanSeq) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 400;
  for (DType dtype : kDtypes) {
    for (bool causal : {false, true}) {
      for (int32_t seq : {7, 77, 257}) {
        // Query rows past kv_lengths[b] still attend to keys [0, kv_lengths[b]) (the twin's rule); 0 gives
        // zeros; 65 and 64 sit on the 64-row tile and key-block edges.
        CudaAttentionCase c;
        c.dtype = dtype;
        c.causal = causal;
        c.seq = seq;
        c.batch = 5;
        c.kv_lengths = {seq, 1, 0, std::max(1, seq / 2), std::max(1, seq - 1)};
        check_case(c, seed++);
        if (seq == 257) {
          c.kv_lengths = {65, 64, 17, 200, 3};
          check_case(c, seed++);
        }
      }
    }
  }
}

TEST(AttentionCudaTest, StridedAndMisalignedOperands) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (DType dtype : kDtypes) {
    for (bool causal : {false, true}) {
      // {qkv_pad, out_pad, qkv_offset}: aligned strides (16-byte path), odd strides and a misaligned base
      // pointer (scalar path).
      for (auto [qkv_pad, out_pad, offset] : {std::array<int64_t, 3>{8, 8, 0}, std::array<int64_t, 3>{3, 5, 0},
                                              std::array<int64_t, 3>{8, 0, 1}, std::array<int64_t, 3>{0, 3, 1}}) {
        CudaAttentionCase c;
        c.dtype = dtype;
        c.causal = causal;
        c.seq = 77;
        c.heads = 4;
        c.qkv_pad = qkv_pad;
        c.out_pad = out_pad;
        c.qkv_offset = offset;
        c.kv_lengths = {77, 30};
        check_case(c, seed++);
      }
    }
  }
}

TEST(AttentionCudaTest, ClipShapes) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 600;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    CudaAttentionCase vit_b;  // ViT-B/32 vision tower
    vit_b.dtype = dtype;
    vit_b.batch = 3;
    vit_b.seq = 50;
    vit_b.heads = 12;
    check_case(vit_b, seed++);
    CudaAttentionCase vit_l = vit_b;  // ViT-L/14 vision tower
    vit_l.seq = 257;
    vit_l.heads = 16;
    check_case(vit_l, seed++);
    CudaAttentionCase text = vit_b;  // text tower: causal, padded prompts
    text.seq = 77;
    text.heads = 8;
    text.causal = true;
    text.kv_lengths = {77, 9, 40};
    check_case(text, seed++);
  }
}

// Grids of more CTAs than fit on the GPU at once, with a different kv_length per batch row.
TEST(AttentionCudaTest, LargeBatchesWithMixedLengths) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 650;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool causal : {false, true}) {
      CudaAttentionCase c;
      c.dtype = dtype;
      c.causal = causal;
      c.batch = 64;
      c.seq = 50;
      c.heads = 12;
      for (int32_t b = 0; b < c.batch; ++b) c.kv_lengths.push_back(b % 9 == 4 ? 0 : 50 - (b * 7) % 50);
      check_case(c, seed++);
      c.batch = 100;  // text tower shape
      c.seq = 77;
      c.heads = 8;
      c.kv_lengths.clear();
      for (int32_t b = 0; b < c.batch; ++b) c.kv_lengths.push_back(1 + (b * 13) % 77);
      check_case(c, seed++);
    }
    CudaAttentionCase odd;  // head_dim 80 (ViT-H/14), scalar loads
    odd.dtype = dtype;
    odd.batch = 96;
    odd.seq = 20;
    odd.heads = 16;
    odd.head_dim = 80;
    odd.qkv_pad = 3;
    check_case(odd, seed++);
  }
}

TEST(AttentionCudaTest, LargestSupportedSequences) {
  MMSERVE_REQUIRE_GPU();
  struct Limit {
    DType dtype;
    int64_t seq, head_dim;
  };
  uint32_t seed = 700;
  for (const Limit& l : {Limit{DType::kBF16, 768, 64}, Limit{DType::kF16, 384, 128}, Limit{DType::kBF16, 624, 80},
                         Limit{DType::kF32, 1024, 64}}) {
    ASSERT_TRUE(attention_cuda_supported(l.dtype, l.seq, l.head_dim));
    CudaAttentionCase c;
    c.dtype = l.dtype;
    c.batch = 1;
    c.heads = 2;
    c.seq = l.seq;
    c.head_dim = l.head_dim;
    check_case(c, seed++);
    c.causal = true;
    check_case(c, seed++);
  }
}

TEST(AttentionCudaTest, CapturedInCudaGraph) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 800;
  for (DType dtype : kDtypes) {
    CudaAttentionCase c;  // seq 257 needs > 48 KB of shared memory in the 16-bit kernel
    c.dtype = dtype;
    c.seq = 257;
    c.heads = 4;
    c.causal = true;
    c.kv_lengths = {257, 100};
    c.graph = true;
    check_case(c, seed++);
    CudaAttentionCase many;  // a grid larger than one wave
    many.dtype = dtype;
    many.seq = 50;
    many.heads = 12;
    many.batch = 64;
    many.graph = true;
    check_case(many, seed++);
  }
}

TEST(AttentionCudaTest, EmptyBatchIsANoOp) {
  MMSERVE_REQUIRE_GPU();
  AttentionCudaArgs args;
  args.batch = 0;
  args.seq = 50;
  args.heads = 12;
  args.head_dim = 64;
  args.qkv_ld = 3 * 768;
  args.out_ld = 768;
  EXPECT_TRUE(attention_cuda(args, nullptr).ok());
  args.batch = 2;
  args.seq = 0;
  EXPECT_TRUE(attention_cuda(args, nullptr).ok());
  CudaAttentionCase c;
  c.batch = 0;
  check_case(c, 900);
}

TEST(AttentionCudaTest, UnsupportedShapesAreUnimplemented) {
  MMSERVE_REQUIRE_GPU();
  EXPECT_TRUE(attention_cuda_supported(DType::kBF16, 257, 64));
  EXPECT_TRUE(attention_cuda_supported(DType::kBF16, 768, 64));
  EXPECT_FALSE(attention_cuda_supported(DType::kBF16, 769, 64));
  EXPECT_TRUE(attention_cuda_supported(DType::kF16, 2384, 16));
  EXPECT_FALSE(attention_cuda_supported(DType::kF16, 2385, 16));
  EXPECT_TRUE(attention_cuda_supported(DType::kBF16, 384, 128));
  EXPECT_FALSE(attention_cuda_supported(DType::kF16, 257, 129));
  EXPECT_FALSE(attention_cuda_supported(DType::kF16, 400, 128));
  EXPECT_FALSE(attention_cuda_supported(DType::kF32, 4097, 64));
  EXPECT_FALSE(attention_cuda_supported(DType::kF32, 50, 257));
  EXPECT_FALSE(attention_cuda_supported(DType::kI8, 50, 64));

  DeviceVector<uint8_t> dummy(256);  // never read: nothing is launched
  struct Shape {
    DType dtype;
    int64_t seq, head_dim;
  };
  for (const Shape& s : {Shape{DType::kBF16, 50, 129}, Shape{DType::kF16, 50, 256}, Shape{DType::kBF16, 800, 64},
                         Shape{DType::kF16, 400, 128}, Shape{DType::kF32, 5000, 64}, Shape{DType::kF32, 50, 300},
                         Shape{DType::kI8, 50, 64}, Shape{DType::kF8E4M3, 50, 64}}) {
    AttentionCudaArgs args;
    args.qkv = dummy.get();
    args.out = dummy.get() + 128;
    args.dtype = s.dtype;
    args.batch = 1;
    args.seq = s.seq;
    args.heads = 1;
    args.head_dim = s.head_dim;
    args.qkv_ld = 3 * s.head_dim;
    args.out_ld = s.head_dim;
    const Status status = attention_cuda(args, nullptr);
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented)
        << dtype_name(s.dtype) << " seq=" << s.seq << " head_dim=" << s.head_dim << ": " << status.to_string();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(AttentionCudaTest, BadArgumentsAreInvalid) {
  MMSERVE_REQUIRE_GPU();
  DeviceVector<uint8_t> dummy(256);
  AttentionCudaArgs good;
  good.qkv = dummy.get();
  good.out = dummy.get() + 128;
  good.batch = 1;
  good.seq = 4;
  good.heads = 2;
  good.head_dim = 16;
  good.qkv_ld = 96;
  good.out_ld = 32;
  std::vector<AttentionCudaArgs> bad(7, good);
  bad[0].qkv = nullptr;
  bad[1].out = nullptr;
  bad[2].qkv_ld = 95;
  bad[3].out_ld = 31;
  bad[4].batch = -1;
  bad[5].heads = 0;
  bad[6].seq = -3;
  for (size_t i = 0; i < bad.size(); ++i) {
    const Status status = attention_cuda(bad[i], nullptr);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "case " << i << ": " << status.to_string();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace mmserve::kernels
