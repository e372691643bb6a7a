// Tests of paged_attention_cuda() and paged_kv_write_cuda() against their CPU twins on identical inputs (the cases
// of paged_attention_test_util.h: shuffled block tables, NaN in every slot no sequence reaches and in q's padding
// columns). Every test skips, saying why, without a GPU. Covered: head_dim 8/64/128 (and 96, 256 on the plain
// path), heads/kv_heads 1/1, 4/1, 8/2, 6/3, 32/8, block_size 1/16/32, f32/f16/bf16, decode-only steps (one
// partition and split-K, window), prefill-only steps (several 64-token tiles, window), mixed steps with chunked
// prefill (17 new tokens over a cached past) and q_len 0, a prefix shared by two sequences, strided q/out,
// misaligned caches (element loads), the KV write bit for bit, a CUDA graph captured once with bucket bounds and
// replayed after the lengths, query offsets and tables changed in device memory, and the argument errors.
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

// The twin's output, [num_tokens, out_ld] as f32 (padding columns kOutInit).
std::vector<float> run_twin(const PagedCase& c, const PagedData& d) {
  const std::vector<uint8_t> q = cuda_test::encode(d.q, c.dtype), k = cuda_test::encode(d.k_cache, c.dtype),
                             v = cuda_test::encode(d.v_cache, c.dtype);
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
  const Status status = paged_attention_cpu(a);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return cuda_test::decode(out, c.dtype);
}

void compare(const PagedCase& c, const PagedData& d, const std::vector<float>& got, const std::vector<float>& ref) {
  const int64_t hidden = c.heads * c.head_dim;
  double worst = 0.0, scale = std::max(d.max_v, 1e-3);
  for (int64_t r = 0; r < d.num_tokens; ++r) {
    for (int64_t col = 0; col < d.out_ld; ++col) {
      const size_t i = static_cast<size_t>(r * d.out_ld + col);
      if (col >= hidden) {
        ASSERT_EQ(got[i], kOutInit) << "output padding written, row " << r;
        continue;
      }
      const double e = std::fabs(static_cast<double>(got[i]) - ref[i]);
      if (!(e <= worst)) worst = e;  // NaN too
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
    }
  }
  EXPECT_LE(worst, tolerance(c.dtype) * scale) << "max |gpu - twin| " << worst << ", scale " << scale;
}

// Device copies of a case; `kv_offset` elements shift the caches off 16-byte alignment.
struct DeviceCase {
  DeviceVector<uint8_t> q, k, v, out, ws;
  DeviceVector<int32_t> tables, lens, starts;
  PagedAttentionArgs args;
  DeviceCase(const PagedCase& c, const PagedData& d, int64_t kv_offset = 0, const PagedAttentionArgs* bounds = nullptr)
      : q(cuda_test::encode(d.q, c.dtype)),
        k(with_offset(cuda_test::encode(d.k_cache, c.dtype), kv_offset * dtype_size(c.dtype))),
        v(with_offset(cuda_test::encode(d.v_cache, c.dtype), kv_offset * dtype_size(c.dtype))),
        out(cuda_test::encode(std::vector<float>(static_cast<size_t>(d.num_tokens * d.out_ld), kOutInit), c.dtype)),
        ws(std::vector<uint8_t>(paged_attention_cuda_workspace_bytes(bounds ? *bounds : paged_test::make_args(c, d)), 0)),
        tables(d.block_tables),
        lens(d.seq_lens),
        starts(d.query_start) {
    args = bounds ? *bounds : paged_test::make_args(c, d);
    args.q = q.get();
    args.k_cache = k.get() + kv_offset * dtype_size(c.dtype);
    args.v_cache = v.get() + kv_offset * dtype_size(c.dtype);
    args.out = out.get();
    args.block_tables = tables.get();
    args.seq_lens = lens.get();
    args.query_start = starts.get();
    args.workspace = ws.get();
    args.workspace_bytes = ws.size();
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

}  // namespace
}  // namespace mmserve::kernels
