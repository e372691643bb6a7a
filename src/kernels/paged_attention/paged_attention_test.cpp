// Tests of paged_attention_cpu and paged_kv_write_cpu (the CPU twins of paged_attention_cuda) against a naive
// double loop written from the contract in paged_attention.h over contiguous copies of each sequence's keys
// (paged_attention_test_util.h): head_dim 8/64/128, heads/kv_heads 1/1, 4/1, 8/2, 6/3, block_size 1/16/32,
// sequences of mixed q_len (0, 1, 3, 17, 40; q_len == L too; L up to 300), shuffled block tables, a shared prefix,
// sliding windows, f32/f16/bf16, strided q and out (q as the first columns of a fused QKV row), and the argument
// and data checks (block outside the pool, inconsistent query_start, seq_len < q_len, slots out of the pool).
// FP8 pools (E4M3, E5M2; scales that make some values saturate) against the same loop over the exact dequantised
// values, the FP8 write's codes against fp8_encode(x / scale), and the FP8 refusals (f32 activations, null or
// non-positive scales).
// Tolerance (as attention_kv_test.cpp): max |twin - ref| <= tol * max(max |ref|, max |v|), tol 2e-5 for f32
// and two units of the output's rounding for f16 (2^-10) and bf16 (2^-7).
#include "kernels/paged_attention/paged_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/fp8/fp8.h"
#include "kernels/paged_attention/paged_attention_test_util.h"

namespace mmserve::kernels {
namespace {

using paged_test::PagedCase;
using paged_test::PagedData;
using paged_test::Seq;

constexpr float kSentinel = 768.0f;

double tolerance(DType dtype) {
  return dtype == DType::kF32 ? 2e-5 : dtype == DType::kF16 ? 2.0 / 1024 : 2.0 / 128;
}

// Host buffers of a case in its dtype, and the arguments pointing at them.
struct HostBuffers {
  std::vector<uint8_t> q, k, v, out;
  std::vector<float> scales;  // FP8: k_scale, v_scale (on the heap: the struct moves)
  PagedAttentionArgs args;
};

std::vector<uint8_t> bytes_of(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> floats_of(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  convert_to_f32(dtype, bytes.data(), out.data(), static_cast<int64_t>(out.size()));
  return out;
}

HostBuffers host_buffers(const PagedCase& c, PagedData& d) {
  HostBuffers h;
  h.q = bytes_of(d.q, c.dtype);
  const bool fp8 = c.kv_storage != PagedKvStorage::kSame;
  h.k = fp8 ? d.k_codes : bytes_of(d.k_cache, c.dtype);
  h.v = fp8 ? d.v_codes : bytes_of(d.v_cache, c.dtype);
  h.scales = {c.k_scale, c.v_scale};
  h.out = bytes_of(std::vector<float>(static_cast<size_t>(std::max<int64_t>(d.num_tokens, 1) * d.out_ld), kSentinel),
                   c.dtype);
  h.args = paged_test::make_args(c, d);
  h.args.q = h.q.data();
  h.args.k_cache = h.k.data();
  h.args.v_cache = h.v.data();
  h.args.out = h.out.data();
  h.args.block_tables = d.block_tables.data();
  h.args.seq_lens = d.seq_lens.data();
  h.args.query_start = d.query_start.data();
  if (fp8) {
    h.args.k_scale = &h.scales[0];
    h.args.v_scale = &h.scales[1];
  }
  return h;
}

void check(const PagedCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name());
  PagedData d = paged_test::make_data(c, seed);
  HostBuffers h = host_buffers(c, d);
  const Status status = paged_attention_cpu(h.args);
  ASSERT_TRUE(status.ok()) << status.to_string();
  const std::vector<float> out = floats_of(h.out, c.dtype);
  const int64_t hidden = c.heads * c.head_dim;
  for (int64_t r = 0; r < d.num_tokens; ++r) {
    for (int64_t col = hidden; col < d.out_ld; ++col) ASSERT_EQ(out[r * d.out_ld + col], kSentinel) << "padding written";
  }
  const std::vector<double> ref = paged_test::reference(c, d);
  const std::vector<float> got = paged_test::dense(out, d.num_tokens, d.out_ld, hidden);
  const double err = test_util::max_abs_error(got, ref);
  const double scale = std::max({test_util::max_abs(ref), d.max_v, 1e-3});
  EXPECT_LE(err, tolerance(c.dtype) * scale) << "max |twin - ref| " << err << ", scale " << scale;
}

// Mixed q_len (0, 1, 3 == L, 17, 40) and lengths up to 300.
std::vector<Seq> mixed_seqs() {
  return {{1, 37}, {3, 3}, {0, 20}, {17, 150}, {40, 300}, {1, 1}};
}

TEST(PagedAttentionCpu, ShapeSweep) {
  constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
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
        if (rotate % 4 == 1) {  // q as the first columns of a fused QKV row, out with a gap
          c.q_pad = 2 * c.kv_heads * c.head_dim;
          c.out_pad = 3;
        }
        ++rotate;
        check(c, seed++);
      }
    }
  }
}

TEST(PagedAttentionCpu, SlidingWindow) {
  uint32_t seed = 100;
  for (int64_t window : {1, 5, 64, 1000}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      PagedCase c;
      c.dtype = dtype;
      c.heads = 8;
      c.kv_heads = 2;
      c.head_dim = 64;
      c.window = window;
      c.seqs = mixed_seqs();
      check(c, seed++);
    }
  }
}

TEST(PagedAttentionCpu, SharedPrefixAndPrefillOnly) {
  PagedCase c;
  c.dtype = DType::kF16;
  c.heads = 4;
  c.kv_heads = 1;
  c.head_dim = 64;
  c.seqs = {{1, 100}, {17, 90}};  // sequence 1 reuses the first 3 blocks of sequence 0
  c.shared_blocks = 3;
  check(c, 7);
  c.seqs = {{40, 40}, {17, 17}, {3, 3}};  // prefill only, q_len == L
  c.shared_blocks = 0;
  check(c, 8);
  c.seqs = {{1, 300}, {1, 1}, {1, 17}};  // decode only
  check(c, 9);
}

// FP8 pools: both formats, f16 and bf16, GQA, block sizes, chunked-prefill mixes, a window, a shared prefix. The
// scales put |K| up to ~2 / k_scale (past 448 for E4M3 at 0.004: saturated codes) and V in range.
TEST(PagedAttentionCpu, Fp8Pool) {
  const int64_t kHeads[][2] = {{4, 1}, {8, 2}, {6, 3}, {2, 2}};
  const float kScales[][2] = {{1.0f, 1.0f}, {0.004f, 0.01f}, {0.03f, 0.0021f}};
  uint32_t seed = 300;
  int rotate = 0;
  for (PagedKvStorage storage : {PagedKvStorage::kFp8E4M3, PagedKvStorage::kFp8E5M2}) {
    for (int64_t head_dim : {8, 64, 128}) {
      for (const auto& hk : kHeads) {
        PagedCase c;
        c.dtype = rotate % 2 == 0 ? DType::kBF16 : DType::kF16;
        c.kv_storage = storage;
        c.k_scale = kScales[rotate % 3][0];
        c.v_scale = kScales[rotate % 3][1];
        c.heads = hk[0];
        c.kv_heads = hk[1];
        c.head_dim = head_dim;
        c.block_size = rotate % 3 == 0 ? 16 : rotate % 3 == 1 ? 1 : 32;
        c.window = rotate % 5 == 2 ? 24 : 0;
        c.shared_blocks = rotate % 4 == 3 ? 1 : 0;
        c.seqs = mixed_seqs();
        if (c.shared_blocks > 0) c.seqs = {{1, 100}, {17, 90}, {1, 1}};
        ++rotate;
        check(c, seed++);
      }
    }
  }
}

TEST(PagedAttentionCpu, Fp8PoolSaturates) {
  // Values past the format's largest finite code (|K| up to 2 / 0.001 = 2000 > 448) read back as +-448 * scale.
  PagedCase c;
  c.dtype = DType::kBF16;
  c.kv_storage = PagedKvStorage::kFp8E4M3;
  c.k_scale = 0.001f;
  c.v_scale = 0.001f;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.seqs = {{1, 20}, {5, 9}};
  PagedData d = paged_test::make_data(c, 11);
  int saturated = 0;
  for (const uint8_t code : d.k_codes) saturated += (code & 0x7F) == 0x7E;
  EXPECT_GT(saturated, 0) << "the case should saturate some keys";
  check(c, 11);
}

TEST(PagedAttentionCpu, Fp8Refusals) {
  PagedCase c;
  c.dtype = DType::kBF16;
  c.kv_storage = PagedKvStorage::kFp8E4M3;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 8;
  c.block_size = 4;
  c.seqs = {{1, 9}, {3, 5}};
  PagedData d = paged_test::make_data(c, 3);
  HostBuffers h = host_buffers(c, d);
  ASSERT_TRUE(paged_attention_cpu(h.args).ok());
  PagedAttentionArgs a = h.args;
  a.k_scale = nullptr;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = h.args;
  a.v_scale = nullptr;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = h.args;
  a.dtype = DType::kF32;  // f32 activations with an FP8 pool: refused
  const Status f32 = paged_attention_cpu(a);
  EXPECT_EQ(f32.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f32.to_string().find("f16 or bf16"), std::string::npos) << f32.to_string();
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    h.scales[0] = bad;
    EXPECT_EQ(paged_attention_cpu(h.args).code(), StatusCode::kInvalidArgument) << bad;
  }
  h.scales[0] = 1.0f;
  a = h.args;
  a.kv_storage = static_cast<PagedKvStorage>(7);
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
}

// A case small enough to edit by hand for the checks.
struct Small {
  PagedCase c;
  PagedData d;
  HostBuffers h;
  Small() {
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 8;
    c.block_size = 4;
    c.seqs = {{1, 9}, {3, 5}};
    d = paged_test::make_data(c, 3);
    h = host_buffers(c, d);
  }
};

TEST(PagedAttentionCpu, DataChecks) {
  {
    Small s;
    ASSERT_TRUE(paged_attention_cpu(s.h.args).ok());
  }
  {
    Small s;
    s.d.block_tables[1] = static_cast<int32_t>(s.d.num_blocks);  // sequence 0's second block outside the pool
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
    s.d.block_tables[1] = -1;
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
  {
    Small s;
    s.d.query_start[2] = 3;  // != num_tokens (4)
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
  {
    Small s;
    s.d.query_start[0] = 1;
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
  {
    Small s;
    s.d.query_start[1] = 5;  // decreasing: sequence 1 would have -1 tokens
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
  {
    Small s;
    s.d.seq_lens[1] = 2;  // fewer keys than new tokens
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
  {
    Small s;
    s.d.seq_lens[0] = 10;  // longer than max_seq_len
    EXPECT_EQ(paged_attention_cpu(s.h.args).code(), StatusCode::kInvalidArgument);
  }
}

TEST(PagedAttentionCpu, ArgumentChecks) {
  Small s;
  PagedAttentionArgs a = s.h.args;
  a.heads = 3;  // not a multiple of kv_heads
  a.kv_heads = 2;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = s.h.args;
  a.q_ld = a.heads * a.head_dim - 1;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = s.h.args;
  a.max_seq_len = a.block_table_ld * a.block_size + 1;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = s.h.args;
  a.dtype = DType::kF8E4M3;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = s.h.args;
  a.k_cache = nullptr;
  EXPECT_EQ(paged_attention_cpu(a).code(), StatusCode::kInvalidArgument);
  a = s.h.args;
  a.num_tokens = 0;  // empty step: nothing to do
  EXPECT_TRUE(paged_attention_cpu(a).ok());
}

TEST(PagedKvWriteCpu, WritesSlotsSkipsNegative) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t width = 24, src_ld = 3 * width + 5, tokens = 5, slots = 12;
    const std::vector<float> k = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 1);
    const std::vector<float> v = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 2);
    std::vector<uint8_t> kb = bytes_of(k, dtype), vb = bytes_of(v, dtype);
    std::vector<uint8_t> kc = bytes_of(std::vector<float>(static_cast<size_t>(slots * width), kSentinel), dtype);
    std::vector<uint8_t> vc = kc;
    const std::vector<int32_t> slot_mapping = {7, -1, 0, 11, -5};
    PagedKvWriteArgs a;
    a.k = kb.data();
    a.v = vb.data();
    a.src_ld = src_ld;
    a.k_cache = kc.data();
    a.v_cache = vc.data();
    a.dtype = dtype;
    a.slot_mapping = slot_mapping.data();
    a.num_tokens = tokens;
    a.width = width;
    a.num_slots = slots;
    ASSERT_TRUE(paged_kv_write_cpu(a).ok());
    const std::vector<float> kf = floats_of(kc, dtype), vf = floats_of(vc, dtype);
    const std::vector<float> k_in = floats_of(kb, dtype), v_in = floats_of(vb, dtype);
    for (int64_t slot = 0; slot < slots; ++slot) {
      int64_t t = -1;
      for (int64_t i = 0; i < tokens; ++i) t = slot_mapping[i] == slot ? i : t;
      for (int64_t col = 0; col < width; ++col) {
        EXPECT_EQ(kf[slot * width + col], t < 0 ? kSentinel : k_in[t * src_ld + col]) << slot << "," << col;
        EXPECT_EQ(vf[slot * width + col], t < 0 ? kSentinel : v_in[t * src_ld + col]) << slot << "," << col;
      }
    }
    const std::vector<int32_t> outside = {3, 12};
    a.slot_mapping = outside.data();
    a.num_tokens = 2;
    const std::vector<uint8_t> before = kc;
    EXPECT_EQ(paged_kv_write_cpu(a).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(kc, before) << "a refused write must write nothing";
    a.src_ld = width - 1;
    EXPECT_EQ(paged_kv_write_cpu(a).code(), StatusCode::kInvalidArgument);
  }
}

TEST(PagedKvWriteCpu, Fp8QuantisesSlots) {
  for (PagedKvStorage storage : {PagedKvStorage::kFp8E4M3, PagedKvStorage::kFp8E5M2}) {
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string(paged_kv_storage_name(storage)) + " " + dtype_name(dtype));
      const Fp8Format format = storage == PagedKvStorage::kFp8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
      const int64_t width = 40, src_ld = 3 * width + 8, tokens = 6, slots = 10;
      // K scaled so that some values pass the largest code (saturation), V well inside the range.
      const std::vector<float> scales = {format == Fp8Format::kE4M3 ? 0.0015f : 1.5e-5f, 0.37f};
      const std::vector<float> k = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 5);
      const std::vector<float> v = test_util::random_floats(static_cast<size_t>(tokens * src_ld), 6);
      const std::vector<uint8_t> kb = bytes_of(k, dtype), vb = bytes_of(v, dtype);
      std::vector<uint8_t> kc(static_cast<size_t>(slots * width), 0xA5), vc = kc;
      const std::vector<int32_t> slot_mapping = {9, -1, 0, 4, -3, 5};
      PagedKvWriteArgs a;
      a.k = kb.data();
      a.v = vb.data();
      a.src_ld = src_ld;
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.dtype = dtype;
      a.slot_mapping = slot_mapping.data();
      a.num_tokens = tokens;
      a.width = width;
      a.num_slots = slots;
      a.kv_storage = storage;
      a.k_scale = &scales[0];
      a.v_scale = &scales[1];
      ASSERT_TRUE(paged_kv_write_cpu(a).ok());
      const std::vector<float> k_in = floats_of(kb, dtype), v_in = floats_of(vb, dtype);
      int saturated = 0;
      for (int64_t slot = 0; slot < slots; ++slot) {
        int64_t t = -1;
        for (int64_t i = 0; i < tokens; ++i) t = slot_mapping[i] == slot ? i : t;
        for (int64_t col = 0; col < width; ++col) {
          const uint8_t k_want = t < 0 ? 0xA5 : fp8_encode(k_in[t * src_ld + col] / scales[0], format);
          const uint8_t v_want = t < 0 ? 0xA5 : fp8_encode(v_in[t * src_ld + col] / scales[1], format);
          ASSERT_EQ(kc[slot * width + col], k_want) << "slot " << slot << " col " << col;
          ASSERT_EQ(vc[slot * width + col], v_want) << "slot " << slot << " col " << col;
          if (t >= 0 && std::fabs(k_in[t * src_ld + col] / scales[0]) > fp8_max(format)) {
            ++saturated;
            EXPECT_EQ(fp8_decode(kc[slot * width + col], format), std::copysign(fp8_max(format), k_in[t * src_ld + col]));
          }
        }
      }
      EXPECT_GT(saturated, 0) << "the case should saturate some keys";
      PagedKvWriteArgs b = a;
      b.k_scale = nullptr;
      EXPECT_EQ(paged_kv_write_cpu(b).code(), StatusCode::kInvalidArgument);
      b = a;
      b.dtype = DType::kF32;
      EXPECT_EQ(paged_kv_write_cpu(b).code(), StatusCode::kInvalidArgument);
      const std::vector<float> zero = {0.0f, 1.0f};
      b = a;
      b.k_scale = &zero[0];
      EXPECT_EQ(paged_kv_write_cpu(b).code(), StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace mmserve::kernels
