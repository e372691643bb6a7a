// Tests of paged_attention_cuda() and paged_kv_write_cuda() against their CPU twins on identical inputs (the cases
// of paged_attention_test_util.h: shuffled block tables, NaN in every slot no sequence reaches and in q's padding
// columns). Every test skips, saying why, without a GPU. Covered: head_dim 8/64/128 (and 96, 256 on the plain
// path), heads/kv_heads 1/1, 4/1, 8/2, 6/3, 32/8, block_size 1/16/32, f32/f16/bf16, decode-only steps (one
// partition and split-K, window), prefill-only steps (several 64-token tiles, window), mixed steps with chunked
// prefill (17 new tokens over a cached past) and q_len 0, a prefix shared by two sequences, strided q/out,
// misaligned caches (element loads), the KV write bit for bit, a CUDA graph captured once with bucket bounds and
// replayed after the lengths, query offsets and tables changed in device memory, and the argument errors.
// FP8 pools (E4M3, E5M2 with f16 and bf16 activations; scales that saturate some codes): the same shapes through
// every path (split-K decode, tensor-core prefill, the plain kernel, misaligned caches), a graph replayed after the
// scales changed in device memory, and the FP8 write's codes bit for bit with the twin. The twin reads the same
// codes, so the tolerance is the 16-bit one.
// Tolerance (as attention_kv_cuda_test.cpp): max |gpu - twin| <= tol * max(max |twin|, max |v|): f32 2e-5, f16
// 2e-3, bf16 2e-2 (P rounded to the dtype before P V, and the output rounded).
#include "kernels/paged_attention/paged_attention_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/paged_attention/paged_attention_test_util.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve::kernels {
namespace {

using cuda_test::DeviceVector;
using paged_test::PagedCase;
using paged_test::PagedData;
using paged_test::Seq;

constexpr float kOutInit = 768.0f;  // exact in f32, f16 and bf16

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2e-3 : 2e-2;
}

bool fp8_pool(const PagedCase& c) { return c.kv_storage != PagedKvStorage::kSame; }

// The pool's bytes: the values in the dtype, or an FP8 pool's codes.
std::vector<uint8_t> pool_bytes(const PagedCase& c, const std::vector<float>& values, const std::vector<uint8_t>& codes) {
  return fp8_pool(c) ? codes : cuda_test::encode(values, c.dtype);
}

// The twin's output, [num_tokens, out_ld] as f32 (padding columns kOutInit).
std::vector<float> run_twin(const PagedCase& c, const PagedData& d) {
  const std::vector<uint8_t> q = cuda_test::encode(d.q, c.dtype), k = pool_bytes(c, d.k_cache, d.k_codes),
                             v = pool_bytes(c, d.v_cache, d.v_codes);
  const float scales[2] = {c.k_scale, c.v_scale};
  std::vector<uint8_t> out =
      cuda_test::encode(std::vector<float>(static_cast<size_t>(d.num_tokens * d.out_ld), kOutInit), c.dtype);
  PagedAttentionArgs a = paged_test::make_args(c, d);
  a.q = q.data();
  a.k_cache = k.data();
  a.v_cache = v.data();
  a.out = out.data();
  a.block_tables = d.block_tables.data();
  a.seq_lens = d.seq_lens.data();
  a.query_start = d.query_start.data();
  if (fp8_pool(c)) {
    a.k_scale = &scales[0];
    a.v_scale = &scales[1];
  }
  const Status status = paged_attention_cpu(a);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return cuda_test::decode(out, c.dtype);
}

void compare(const PagedCase& c, const PagedData& d, const std::vector<float>& got, const std::vector<float>& ref) {
  const int64_t hidden = c.heads * c.head_dim;
  double worst = 0.0, scale = std::max(d.max_v, 1e-3);
  int64_t worst_row = 0, worst_col = 0;
  for (int64_t r = 0; r < d.num_tokens; ++r) {
    for (int64_t col = 0; col < d.out_ld; ++col) {
      const size_t i = static_cast<size_t>(r * d.out_ld + col);
      if (col >= hidden) {
        ASSERT_EQ(got[i], kOutInit) << "output padding written, row " << r;
        continue;
      }
      const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
      if (!(e <= worst)) {  // NaN too
        worst = e;
        worst_row = r;
        worst_col = col;
      }
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    }
  }
  // Where the worst element is: its sequence (and that sequence's q_len and length), head and dimension.
  size_t b = 0;
  while (b + 1 < c.seqs.size() && d.query_start[b + 1] <= worst_row) ++b;
  const size_t at = static_cast<size_t>(worst_row * d.out_ld + worst_col);
  EXPECT_LE(worst, tolerance(c.dtype) * scale)
      << "max |gpu - twin| " << worst << " (tolerance " << tolerance(c.dtype) * scale << ", scale " << scale
      << ") at row " << worst_row << ": sequence " << b << " (q_len " << c.seqs[b].q_len << ", length "
      << c.seqs[b].length << ", token " << worst_row - d.query_start[b] << "), head " << worst_col / c.head_dim
      << ", dim " << worst_col % c.head_dim << ": gpu " << got[at] << ", twin " << ref[at];
}

// Device copies of a case; `kv_offset` elements shift the caches off 16-byte alignment.
struct DeviceCase {
  DeviceVector<uint8_t> q, k, v, out, ws;
  DeviceVector<int32_t> tables, lens, starts;
  DeviceVector<float> scales;  // k_scale, v_scale (FP8 pools)
  PagedAttentionArgs args;
  DeviceCase(const PagedCase& c, const PagedData& d, int64_t kv_offset = 0, const PagedAttentionArgs* bounds = nullptr)
      : q(cuda_test::encode(d.q, c.dtype)),
        k(with_offset(pool_bytes(c, d.k_cache, d.k_codes), kv_offset * element_bytes(c))),
        v(with_offset(pool_bytes(c, d.v_cache, d.v_codes), kv_offset * element_bytes(c))),
        out(cuda_test::encode(std::vector<float>(static_cast<size_t>(d.num_tokens * d.out_ld), kOutInit), c.dtype)),
        ws(std::vector<uint8_t>(paged_attention_cuda_workspace_bytes(bounds ? *bounds : paged_test::make_args(c, d)), 0)),
        tables(d.block_tables),
        lens(d.seq_lens),
        starts(d.query_start),
        scales(std::vector<float>{c.k_scale, c.v_scale}) {
    args = bounds ? *bounds : paged_test::make_args(c, d);
    args.q = q.get();
    args.k_cache = k.get() + kv_offset * element_bytes(c);
    args.v_cache = v.get() + kv_offset * element_bytes(c);
    if (fp8_pool(c)) {
      args.k_scale = scales.get();
      args.v_scale = scales.get() + 1;
    }
    args.out = out.get();
    args.block_tables = tables.get();
    args.seq_lens = lens.get();
    args.query_start = starts.get();
    args.workspace = ws.get();
    args.workspace_bytes = ws.size();
  }
  static size_t element_bytes(const PagedCase& c) {
    return static_cast<size_t>(paged_kv_element_bytes(c.kv_storage, c.dtype));
  }
  static std::vector<uint8_t> with_offset(std::vector<uint8_t> bytes, size_t offset) {
    bytes.insert(bytes.begin(), offset, 0);
    return bytes;
  }
};

void check(const PagedCase& c, uint32_t seed, int64_t kv_offset = 0) {
  SCOPED_TRACE(c.name() + (kv_offset ? " misaligned" : ""));
  const PagedData d = paged_test::make_data(c, seed);
  const std::vector<float> ref = run_twin(c, d);
  DeviceCase dev(c, d, kv_offset);
  const Status status = paged_attention_cuda(dev.args, nullptr);
  ASSERT_TRUE(status.ok()) << status.to_string();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  compare(c, d, cuda_test::decode(dev.out.download(), c.dtype), ref);
}

std::vector<Seq> mixed_seqs() {
  return {{1, 37}, {3, 3}, {0, 20}, {17, 150}, {40, 300}, {1, 1}};
}

TEST(PagedAttentionCuda, ShapeSweep) {
  MMSERVE_REQUIRE_GPU();
  constexpr DType kDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};
  const int64_t kHeads[][2] = {{1, 1}, {4, 1}, {8, 2}, {6, 3}};
  uint32_t seed = 1;
  int rotate = 0;
  for (int64_t head_dim : {8, 64, 128}) {
    for (const auto& hk : kHeads) {
      for (int64_t block_size : {16, 1, 32}) {
        PagedCase c;
        c.dtype = kDtypes[rotate % 3];
        c.heads = hk[0];
        c.kv_heads = hk[1];
        c.head_dim = head_dim;
        c.block_size = block_size;
        c.seqs = mixed_seqs();
        if (rotate % 4 == 1) {
          c.q_pad = 2 * c.kv_heads * c.head_dim;  // q: the first columns of a fused QKV row
          c.out_pad = 3;
        }
        ++rotate;
        check(c, seed++);
      }
    }
  }
}

TEST(PagedAttentionCuda, EveryDtypeFastPaths) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 50;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t head_dim : {64, 128}) {
      PagedCase c;
      c.dtype = dtype;
      c.heads = 8;
      c.kv_heads = 2;
      c.head_dim = head_dim;
      c.seqs = mixed_seqs();
      check(c, seed++);
      check(c, seed++, /*kv_offset=*/1);  // element loads, plain decode
    }
  }
}

TEST(PagedAttentionCuda, DecodeOnlySplitK) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t head_dim : {64, 128}) {
      for (int64_t window : {0, 700}) {
        PagedCase c;
        c.dtype = dtype;
        c.heads = 32;
        c.kv_heads = 8;
        c.head_dim = head_dim;
        c.window = window;
        c.seqs = {{1, 1}, {1, 511}, {1, 512}, {1, 513}, {1, 1500}, {1, 3000}};
        check(c, seed++);
      }
    }
  }
  PagedCase c;  // one sequence: the partitions shrink to fill the GPU
  c.dtype = DType::kBF16;
  c.heads = 8;
  c.kv_heads = 1;
  c.head_dim = 128;
  c.seqs = {{1, 2049}};
  check(c, seed++);
  c.heads = 16;  // group 16: the plain path
  check(c, seed++);
}

TEST(PagedAttentionCuda, PrefillOnly) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 300;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t head_dim : {64, 128}) {
      for (int64_t window : {0, 5, 100}) {
        PagedCase c;
        c.dtype = dtype;
        c.heads = 8;
        c.kv_heads = 2;
        c.head_dim = head_dim;
        c.window = window;
        c.seqs = {{200, 200}, {17, 17}, {65, 65}, {2, 2}};
        check(c, seed++);
      }
    }
  }
  PagedCase c;  // the plain path: f32, and head_dims the fast paths do not take
  c.dtype = DType::kF32;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{70, 70}, {3, 3}};
  check(c, seed++);
  c.dtype = DType::kBF16;
  c.head_dim = 96;
  check(c, seed++);
  c.head_dim = 256;
  c.block_size = 32;
  check(c, seed++);
}

TEST(PagedAttentionCuda, ChunkedPrefillSharedPrefixAndMisaligned) {
  MMSERVE_REQUIRE_GPU();
  PagedCase c;
  c.dtype = DType::kBF16;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.seqs = {{1, 900}, {17, 300}, {1, 64}, {0, 5}, {17, 17}};  // 17 new tokens over a past of 283
  check(c, 400);
  c.dtype = DType::kF16;
  c.head_dim = 64;
  c.seqs = {{1, 100}, {17, 90}};  // sequence 1 reads sequence 0's first 3 blocks in place
  c.shared_blocks = 3;
  check(c, 401);
  c.seqs = {{1, 600}, {17, 520}};
  c.shared_blocks = 20;
  check(c, 402);
  check(c, 403, /*kv_offset=*/3);  // element loads in the tensor-core kernel too
}

TEST(PagedAttentionCuda, StepInCudaGraph) {
  MMSERVE_REQUIRE_GPU();
  // The bucket: 4 sequences, 32 tokens, up to 2048 keys and 29 new tokens; the step changes under the graph.
  PagedCase c;
  c.dtype = DType::kBF16;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.spare_blocks = 40;
  c.table_pad = 0;
  c.seqs = {{1, 2048}, {1, 700}, {1, 1}, {29, 1000}};
  const PagedData first = paged_test::make_data(c, 500);
  PagedAttentionArgs bounds = paged_test::make_args(c, first);
  bounds.max_query_len = 29;
  bounds.max_seq_len = 2048;
  DeviceCase dev(c, first, 0, &bounds);
  ASSERT_GT(dev.args.workspace_bytes, 0u);
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status status = paged_attention_cuda(dev.args, stream);
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.ok()) << status.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  uint32_t seed = 501;
  for (const std::vector<Seq>& step : {std::vector<Seq>{{1, 2048}, {1, 700}, {1, 1}, {29, 1000}},
                                       std::vector<Seq>{{8, 8}, {8, 1500}, {8, 100}, {8, 2000}},
                                       std::vector<Seq>{{0, 9}, {1, 1999}, {2, 2}, {29, 29}}}) {
    PagedCase s = c;
    s.seqs = step;
    const PagedData d = paged_test::make_data(s, seed++);
    SCOPED_TRACE(s.name());
    ASSERT_EQ(d.num_tokens, first.num_tokens);
    ASSERT_LE(d.num_blocks, first.num_blocks);
    ASSERT_LE(d.table_ld, first.table_ld);
    // New pool contents, tables, lengths and offsets (the table row stride stays the bucket's).
    std::vector<int32_t> tables(first.block_tables.size(), -1);
    for (size_t b = 0; b < step.size(); ++b) {
      for (int64_t i = 0; i < d.table_ld; ++i) tables[b * first.table_ld + i] = d.block_tables[b * d.table_ld + i];
    }
    std::vector<float> k = d.k_cache, v = d.v_cache;
    k.resize(first.k_cache.size(), std::nanf(""));
    v.resize(first.v_cache.size(), std::nanf(""));
    dev.k.upload(cuda_test::encode(k, c.dtype));
    dev.v.upload(cuda_test::encode(v, c.dtype));
    dev.q.upload(cuda_test::encode(d.q, c.dtype));
    dev.tables.upload(tables);
    dev.lens.upload(d.seq_lens);
    dev.starts.upload(d.query_start);
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    PagedData twin_data = d;
    twin_data.k_cache = k;
    twin_data.v_cache = v;
    twin_data.block_tables = tables;
    twin_data.table_ld = first.table_ld;
    twin_data.num_blocks = first.num_blocks;
    compare(s, d, cuda_test::decode(dev.out.download(), c.dtype), run_twin(s, twin_data));
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST(PagedAttentionCuda, Errors) {
  MMSERVE_REQUIRE_GPU();
  PagedCase c;
  c.dtype = DType::kBF16;
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{1, 3000}};
  const PagedData d = paged_test::make_data(c, 600);
  DeviceCase dev(c, d);
  ASSERT_GT(dev.args.workspace_bytes, 0u);
  PagedAttentionArgs a = dev.args;
  a.workspace_bytes -= 1;
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a = dev.args;
  a.workspace = nullptr;
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a = dev.args;
  a.head_dim = 264;
  a.q_ld = a.out_ld = a.heads * a.head_dim;
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kUnimplemented);
  a = dev.args;
  a.kv_heads = 3;
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a = dev.args;
  a.num_tokens = 0;  // empty step: nothing launched
  EXPECT_TRUE(paged_attention_cuda(a, nullptr).ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

TEST(PagedKvWriteCuda, BitForBitWithTwin) {
  MMSERVE_REQUIRE_GPU();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (int64_t width : {1024, 24, 13}) {      // 16-byte rows, element rows
      for (int64_t src_pad : {0, 2 * 1024 + 8, 5}) {  // k and v as column slices of a fused QKV row, odd strides
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " width " + std::to_string(width) + " pad " +
                     std::to_string(src_pad));
        const int64_t src_ld = width + src_pad, tokens = 37, slots = 64;
        const std::vector<float> k = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 1);
        const std::vector<float> v = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 2);
        std::vector<int32_t> slot_mapping(static_cast<size_t>(tokens));
        for (int64_t t = 0; t < tokens; ++t) slot_mapping[t] = t % 5 == 3 ? -1 : static_cast<int32_t>((t * 29) % slots);
        const std::vector<uint8_t> kb = cuda_test::encode(k, dtype), vb = cuda_test::encode(v, dtype);
        const std::vector<uint8_t> init =
            cuda_test::encode(std::vector<float>(static_cast<size_t>(slots * width), 768.0f), dtype);
        std::vector<uint8_t> kc = init, vc = init;
        PagedKvWriteArgs a;
        a.src_ld = src_ld;
        a.dtype = dtype;
        a.num_tokens = tokens;
        a.width = width;
        a.num_slots = slots;
        a.k = kb.data();
        a.v = vb.data();
        a.k_cache = kc.data();
        a.v_cache = vc.data();
        a.slot_mapping = slot_mapping.data();
        ASSERT_TRUE(paged_kv_write_cpu(a).ok());
        DeviceVector<uint8_t> dk(kb), dv(vb), dkc(init), dvc(init);
        DeviceVector<int32_t> dslots(slot_mapping);
        a.k = dk.get();
        a.v = dv.get();
        a.k_cache = dkc.get();
        a.v_cache = dvc.get();
        a.slot_mapping = dslots.get();
        ASSERT_TRUE(paged_kv_write_cuda(a, nullptr).ok());
        ASSERT_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(dkc.download(), kc);
        EXPECT_EQ(dvc.download(), vc);
      }
    }
  }
}

// FP8 pools. The scale pairs: 1 (codes as they are), K scaled so that some keys saturate (|K| <= 2: 2 / 0.004 = 500
// > 448 for E4M3), and small ones of both.
constexpr float kFp8Scales[][2] = {{1.0f, 1.0f}, {0.004f, 0.01f}, {0.03f, 0.0021f}};
constexpr PagedKvStorage kFp8Storages[] = {PagedKvStorage::kFp8E4M3, PagedKvStorage::kFp8E5M2};

PagedCase fp8_case(PagedKvStorage storage, DType dtype, int rotate) {
  PagedCase c;
  c.kv_storage = storage;
  c.dtype = dtype;
  c.k_scale = kFp8Scales[rotate % 3][0];
  c.v_scale = kFp8Scales[rotate % 3][1];
  return c;
}

TEST(PagedAttentionCuda, Fp8ShapeSweep) {
  MMSERVE_REQUIRE_GPU();
  const int64_t kHeads[][2] = {{1, 1}, {4, 1}, {8, 2}, {6, 3}, {32, 8}};
  uint32_t seed = 700;
  int rotate = 0;
  for (PagedKvStorage storage : kFp8Storages) {
    for (int64_t head_dim : {8, 64, 128}) {  // 8: the plain kernel
      for (const auto& hk : kHeads) {
        for (int64_t block_size : {16, 1, 32}) {
          PagedCase c = fp8_case(storage, rotate % 2 == 0 ? DType::kBF16 : DType::kF16, rotate);
          c.heads = hk[0];
          c.kv_heads = hk[1];
          c.head_dim = head_dim;
          c.block_size = block_size;
          c.window = rotate % 7 == 3 ? 24 : 0;
          c.seqs = mixed_seqs();
          if (rotate % 4 == 1) {
            c.q_pad = 2 * c.kv_heads * c.head_dim;
            c.out_pad = 3;
          }
          ++rotate;
          check(c, seed++);
        }
      }
    }
  }
}

TEST(PagedAttentionCuda, Fp8DecodeOnlySplitK) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 800;
  int rotate = 0;
  for (PagedKvStorage storage : kFp8Storages) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t head_dim : {64, 128}) {
        for (int64_t window : {0, 700}) {
          PagedCase c = fp8_case(storage, dtype, rotate++);
          c.heads = 32;
          c.kv_heads = 8;
          c.head_dim = head_dim;
          c.window = window;
          c.seqs = {{1, 1}, {1, 511}, {1, 512}, {1, 513}, {1, 1500}, {1, 3000}};
          check(c, seed++);
        }
      }
    }
  }
  PagedCase c = fp8_case(PagedKvStorage::kFp8E4M3, DType::kBF16, 1);  // one sequence: partitions shrink
  c.heads = 8;
  c.kv_heads = 1;
  c.head_dim = 128;
  c.seqs = {{1, 2049}};
  check(c, seed++);
  c.heads = 16;  // group 16: the plain path
  check(c, seed++);
}

TEST(PagedAttentionCuda, Fp8PrefillChunkedAndMisaligned) {
  MMSERVE_REQUIRE_GPU();
  uint32_t seed = 900;
  int rotate = 0;
  for (PagedKvStorage storage : kFp8Storages) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t head_dim : {64, 128}) {
        for (int64_t window : {0, 5, 100}) {
          PagedCase c = fp8_case(storage, dtype, rotate++);
          c.heads = 8;
          c.kv_heads = 2;
          c.head_dim = head_dim;
          c.window = window;
          c.seqs = {{200, 200}, {17, 17}, {65, 65}, {2, 2}};
          check(c, seed++);
        }
      }
      PagedCase c = fp8_case(storage, dtype, rotate++);
      c.heads = 32;
      c.kv_heads = 8;
      c.head_dim = 128;
      c.seqs = {{1, 900}, {17, 300}, {1, 64}, {0, 5}, {17, 17}};  // chunked prefill beside decodes
      check(c, seed++);
      c.head_dim = 64;
      c.seqs = {{1, 600}, {17, 520}};
      c.shared_blocks = 20;
      check(c, seed++);
      check(c, seed++, /*kv_offset=*/3);  // byte loads: the plain decode and the prefill's unaligned loads
      c.head_dim = 96;                     // the plain kernel for a prefill
      c.shared_blocks = 0;
      c.seqs = {{70, 70}, {3, 3}, {1, 40}};
      check(c, seed++);
    }
  }
}

// A decode bucket captured once with an FP8 pool, replayed after the codes and the scales changed in device memory:
// the kernels read the scales on the device, never baked into the graph.
TEST(PagedAttentionCuda, Fp8StepInCudaGraphNewScales) {
  MMSERVE_REQUIRE_GPU();
  PagedCase c = fp8_case(PagedKvStorage::kFp8E4M3, DType::kBF16, 0);
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.seqs = {{1, 2048}, {1, 700}, {1, 1}, {5, 1000}};
  const PagedData first = paged_test::make_data(c, 1000);
  DeviceCase dev(c, first);
  cudaStream_t stream;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status status = paged_attention_cuda(dev.args, stream);
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(status.ok()) << status.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  int rotate = 0;
  for (uint32_t seed : {1001u, 1002u, 1003u}) {
    PagedCase s = fp8_case(PagedKvStorage::kFp8E4M3, DType::kBF16, rotate++);  // new scales each replay
    s.heads = c.heads;
    s.kv_heads = c.kv_heads;
    s.head_dim = c.head_dim;
    s.seqs = c.seqs;
    const PagedData d = paged_test::make_data(s, seed);  // same shapes, new codes
    SCOPED_TRACE(s.name());
    dev.k.upload(d.k_codes);
    dev.v.upload(d.v_codes);
    dev.q.upload(cuda_test::encode(d.q, s.dtype));
    dev.tables.upload(d.block_tables);
    dev.scales.upload(std::vector<float>{s.k_scale, s.v_scale});
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    compare(s, d, cuda_test::decode(dev.out.download(), s.dtype), run_twin(s, d));
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

TEST(PagedAttentionCuda, Fp8Errors) {
  MMSERVE_REQUIRE_GPU();
  PagedCase c = fp8_case(PagedKvStorage::kFp8E5M2, DType::kBF16, 0);
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.seqs = {{1, 300}};
  const PagedData d = paged_test::make_data(c, 1100);
  DeviceCase dev(c, d);
  PagedAttentionArgs a = dev.args;
  a.k_scale = nullptr;
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  a = dev.args;
  a.dtype = DType::kF32;  // no f32 activations over an FP8 pool
  EXPECT_EQ(paged_attention_cuda(a, nullptr).code(), StatusCode::kInvalidArgument);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

TEST(PagedKvWriteCuda, Fp8BitForBitWithTwin) {
  MMSERVE_REQUIRE_GPU();
  for (PagedKvStorage storage : kFp8Storages) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      for (int64_t width : {1024, 24, 13}) {
        for (int64_t src_pad : {0, 2 * 1024 + 8, 5}) {
          SCOPED_TRACE(std::string(paged_kv_storage_name(storage)) + " " + dtype_name(dtype) + " width " +
                       std::to_string(width) + " pad " + std::to_string(src_pad));
          const int64_t src_ld = width + src_pad, tokens = 37, slots = 64;
          // K x 600 past E4M3's 448 at scale 1 (saturation), then a K scale that brings some of E5M2's past 57344.
          std::vector<float> k = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 3);
          for (float& x : k) x *= 600.0f;
          const std::vector<float> v = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 4);
          const std::vector<float> scales = {storage == PagedKvStorage::kFp8E4M3 ? 1.0f : 0.0075f, 0.013f};
          std::vector<int32_t> slot_mapping(static_cast<size_t>(tokens));
          for (int64_t t = 0; t < tokens; ++t) slot_mapping[t] = t % 5 == 3 ? -1 : static_cast<int32_t>((t * 29) % slots);
          const std::vector<uint8_t> kb = cuda_test::encode(k, dtype), vb = cuda_test::encode(v, dtype);
          const std::vector<uint8_t> init(static_cast<size_t>(slots * width), 0xA5);
          std::vector<uint8_t> kc = init, vc = init;
          PagedKvWriteArgs a;
          a.src_ld = src_ld;
          a.dtype = dtype;
          a.num_tokens = tokens;
          a.width = width;
          a.num_slots = slots;
          a.kv_storage = storage;
          a.k = kb.data();
          a.v = vb.data();
          a.k_cache = kc.data();
          a.v_cache = vc.data();
          a.slot_mapping = slot_mapping.data();
          a.k_scale = &scales[0];
          a.v_scale = &scales[1];
          ASSERT_TRUE(paged_kv_write_cpu(a).ok());
          DeviceVector<uint8_t> dk(kb), dv(vb), dkc(init), dvc(init);
          DeviceVector<int32_t> dslots(slot_mapping);
          DeviceVector<float> dscales(scales);
          a.k = dk.get();
          a.v = dv.get();
          a.k_cache = dkc.get();
          a.v_cache = dvc.get();
          a.slot_mapping = dslots.get();
          a.k_scale = dscales.get();
          a.v_scale = dscales.get() + 1;
          ASSERT_TRUE(paged_kv_write_cuda(a, nullptr).ok());
          ASSERT_CUDA_OK(cudaDeviceSynchronize());
          const std::vector<uint8_t> gk = dkc.download(), gv = dvc.download();
          for (size_t i = 0; i < kc.size(); ++i) {
            ASSERT_EQ(static_cast<int>(gk[i]), static_cast<int>(kc[i]))
                << "K code at slot " << i / width << " col " << i % width;
            ASSERT_EQ(static_cast<int>(gv[i]), static_cast<int>(vc[i]))
                << "V code at slot " << i / width << " col " << i % width;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
