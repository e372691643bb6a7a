// Tensor-parallel plans and slicing: slices reassemble to the original (T = 1, 2, 4, odd shapes, f32/f16/bf16
// bytes), a transformer MLP and attention block computed as T ranks (column- then row-parallel, partial outputs
// summed as the all-reduce would) equal the whole computation on the CPU kernels, the plans cover every tensor
// of the real CLIP and Whisper fixtures, and bad plans are clear errors.
#include "models/common/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "kernels/attention/attention.h"
#include "kernels/gemm/gemm.h"
#include "test_paths.h"

namespace mmserve::models {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 0.5f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

HostTensor slice_ok(const Tensor& t, TpSplit split, int64_t heads, int64_t world, int64_t rank) {
  StatusOr<HostTensor> s = tp_slice(t, split, heads, world, rank, "test");
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : HostTensor{};
}

// Column- and row-parallel slices of a [rows, cols] tensor of 16-bit elements (f16/bf16 bit patterns, compared
// as bytes: slicing must not convert) and of f32 reassemble to the original.
void check_reassembly(DType dtype, int64_t rows, int64_t cols, int64_t world) {
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " [" + std::to_string(rows) + ", " + std::to_string(cols) +
               "] T=" + std::to_string(world));
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols) * esize);
  std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols * 7 + world));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const Tensor w(bytes.data(), dtype, {rows, cols});

  std::vector<uint8_t> by_rows, by_cols(bytes.size());
  int64_t col_offset = 0;
  for (int64_t r = 0; r < world; ++r) {
    HostTensor c = slice_ok(w, TpSplit::kColumn, 0, world, r);
    ASSERT_EQ(c.dtype, dtype);
    ASSERT_EQ(c.shape.size(), 2u);
    EXPECT_EQ(c.shape[1], cols);
    by_rows.insert(by_rows.end(), c.bytes.begin(), c.bytes.end());

    HostTensor k = slice_ok(w, TpSplit::kRow, 0, world, r);
    ASSERT_EQ(k.shape.size(), 2u);
    ASSERT_EQ(k.shape[0], rows);
    const int64_t width = k.shape[1];
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(by_cols.data() + (i * cols + col_offset) * esize, k.bytes.data() + i * width * esize, width * esize);
    }
    col_offset += width;
  }
  EXPECT_EQ(col_offset, cols);
  EXPECT_EQ(by_rows, bytes);
  EXPECT_EQ(by_cols, bytes);
}

TEST(TensorParallel, ColumnAndRowSlicesReassembleForOddShapesAndDtypes) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t world : {1, 2, 4}) {
      for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{7, 5}, {13, 9}, {3, 11}, {16, 12}, {1, 1}}) {
        check_reassembly(dtype, rows, cols, world);
      }
    }
  }
}

TEST(TensorParallel, ShardRangesCoverTheExtentExactly) {
  for (int64_t world : {1, 2, 3, 4, 7}) {
    for (int64_t extent : {0, 1, 5, 37, 64}) {
      int64_t next = 0;
      for (int64_t r = 0; r < world; ++r) {
        StatusOr<TpRange> range = tp_shard_range(extent, world, r);
        ASSERT_TRUE(range.ok());
        EXPECT_EQ(range->begin, next);
        EXPECT_GE(range->size(), extent / world);
        EXPECT_LE(range->size(), extent / world + 1);
        next = range->end;
      }
      EXPECT_EQ(next, extent);
    }
  }
}

TEST(TensorParallel, BiasesFollowTheirLinear) {
  std::vector<float> b = random_floats(13, 1);
  const Tensor bias(b.data(), DType::kF32, {13});
  for (int64_t world : {1, 2, 4}) {
    std::vector<float> joined;
    for (int64_t r = 0; r < world; ++r) {
      HostTensor c = slice_ok(bias, TpSplit::kColumn, 0, world, r);
      ASSERT_EQ(c.shape.size(), 1u);
      const float* f = reinterpret_cast<const float*>(c.bytes.data());
      joined.insert(joined.end(), f, f + c.shape[0]);

      HostTensor rb = slice_ok(bias, TpSplit::kRowBias, 0, world, r);
      if (r == 0) {
        ASSERT_EQ(rb.shape, std::vector<int64_t>{13});
        EXPECT_EQ(0, std::memcmp(rb.bytes.data(), b.data(), 13 * sizeof(float)));
      } else {
        EXPECT_TRUE(rb.empty()) << "rank " << r << " must not add the row-parallel bias a second time";
      }
    }
    EXPECT_EQ(joined, b);
  }
}

// The fused [3H, in] QKV sliced per rank equals q, k and v sliced by heads separately and re-fused; and the
// per-rank pieces reassemble to q, k, v.
TEST(TensorParallel, FusedQkvSplitsEachOfQkvByHeads) {
  const int64_t heads = 4, head_dim = 3, hidden = heads * head_dim, in = 5;
  std::vector<uint16_t> fused(static_cast<size_t>(3 * hidden * in));
  for (size_t i = 0; i < fused.size(); ++i) fused[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  const Tensor qkv(fused.data(), DType::kBF16, {3 * hidden, in});
  for (int64_t world : {1, 2, 4}) {
    std::vector<uint16_t> q, k, v;
    for (int64_t r = 0; r < world; ++r) {
      HostTensor s = slice_ok(qkv, TpSplit::kFusedQkvHeads, heads, world, r);
      ASSERT_EQ(s.shape, (std::vector<int64_t>{3 * hidden / world, in}));
      // The same as slicing the three parts by heads and concatenating them.
      std::vector<uint8_t> refused;
      for (int64_t part = 0; part < 3; ++part) {
        const Tensor one(fused.data() + part * hidden * in, DType::kBF16, {hidden, in});
        HostTensor p = slice_ok(one, TpSplit::kColumnHeads, heads, world, r);
        refused.insert(refused.end(), p.bytes.begin(), p.bytes.end());
      }
      EXPECT_EQ(refused, s.bytes);
      const auto* h = reinterpret_cast<const uint16_t*>(s.bytes.data());
      const int64_t n = hidden / world * in;
      q.insert(q.end(), h, h + n);
      k.insert(k.end(), h + n, h + 2 * n);
      v.insert(v.end(), h + 2 * n, h + 3 * n);
    }
    std::vector<uint16_t> joined = q;
    joined.insert(joined.end(), k.begin(), k.end());
    joined.insert(joined.end(), v.begin(), v.end());
    EXPECT_EQ(joined, fused) << "T=" << world;
  }
}

TEST(TensorParallel, SlicesAStridedView) {
  // Columns [4, 10) of a [5, 12] matrix: a view with stride 12, as slice_cols makes.
  std::vector<float> m = random_floats(5 * 12, 2);
  const Tensor whole(m.data(), DType::kF32, {5, 12});
  const Tensor view = whole.slice_cols(4, 10);
  HostTensor s = slice_ok(view, TpSplit::kRow, 0, 2, 1);
  ASSERT_EQ(s.shape, (std::vector<int64_t>{5, 3}));
  const float* f = reinterpret_cast<const float*>(s.bytes.data());
  for (int64_t i = 0; i < 5; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(f[i * 3 + j], m[i * 12 + 4 + 3 + j]);
  }
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

Tensor view_of(HostTensor& h) {
  return h.empty() ? Tensor() : h.view();
}

// y = fc2(gelu(fc1(x))): whole vs T ranks (fc1 column-parallel, fc2 row-parallel, partial outputs summed).
// The intermediate size 37 is not divisible by 2 or 4: uneven shards are exact too.
TEST(TensorParallel, MlpAsRanksEqualsWholeMlp) {
  const int64_t m = 5, hidden = 12, inter = 37;
  std::vector<float> x = random_floats(m * hidden, 3), w1 = random_floats(inter * hidden, 4),
                     b1 = random_floats(inter, 5), w2 = random_floats(hidden * inter, 6), b2 = random_floats(hidden, 7);
  const Tensor tx(x.data(), DType::kF32, {m, hidden}), tw1(w1.data(), DType::kF32, {inter, hidden}),
      tb1(b1.data(), DType::kF32, {inter}), tw2(w2.data(), DType::kF32, {hidden, inter}),
      tb2(b2.data(), DType::kF32, {hidden});

  std::vector<float> h(m * inter), y(m * hidden);
  Tensor th(h.data(), DType::kF32, {m, inter}), ty(y.data(), DType::kF32, {m, hidden});
  kernels::linear(tx, tw1, &tb1, th, kernels::Activation::kGelu);
  kernels::linear(th, tw2, &tb2, ty);

  const TpLayerPlan plan = whisper_encoder_layer_plan(4);
  for (int64_t world : {1, 2, 4}) {
    ASSERT_TRUE(validate_tp_plan(plan, world).ok());
    std::vector<float> sum(m * hidden, 0.0f);  // the all-reduce
    for (int64_t r = 0; r < world; ++r) {
      HostTensor s1 = slice_ok(tw1, *tp_rule_for(plan, "fc1.weight"), 0, world, r);
      HostTensor s1b = slice_ok(tb1, *tp_rule_for(plan, "fc1.bias"), 0, world, r);
      HostTensor s2 = slice_ok(tw2, *tp_rule_for(plan, "fc2.weight"), 0, world, r);
      HostTensor s2b = slice_ok(tb2, *tp_rule_for(plan, "fc2.bias"), 0, world, r);
      const int64_t part = s1.shape[0];
      ASSERT_EQ(s2.shape[1], part);
      std::vector<float> hr(m * part), yr(m * hidden);
      Tensor thr(hr.data(), DType::kF32, {m, part}), tyr(yr.data(), DType::kF32, {m, hidden});
      const Tensor b1r = view_of(s1b), b2r = view_of(s2b);
      kernels::linear(tx, s1.view(), &b1r, thr, kernels::Activation::kGelu);
      kernels::linear(thr, s2.view(), s2b.empty() ? nullptr : &b2r, tyr);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += yr[i];
    }
    EXPECT_LE(max_abs_diff(sum, y), 1e-5f) << "T=" << world;
  }
}

// out_proj(attention(qkv(x))) with 4 heads: whole vs T ranks, each with its heads' fused QKV (column-parallel by
// heads) and its out_proj columns (row-parallel), partial outputs summed. Padding mask on one batch row.
TEST(TensorParallel, AttentionAsRanksEqualsWholeAttention) {
  const int64_t batch = 2, seq = 7, heads = 4, head_dim = 5, hidden = heads * head_dim, rows = batch * seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int32_t kv_lengths[2] = {7, 4};
  const kernels::AttentionMask mask{false, kv_lengths};
  std::vector<float> x = random_floats(rows * hidden, 8), wqkv = random_floats(3 * hidden * hidden, 9),
                     bqkv = random_floats(3 * hidden, 10), wo = random_floats(hidden * hidden, 11),
                     bo = random_floats(hidden, 12);
  const Tensor tx(x.data(), DType::kF32, {rows, hidden}), twqkv(wqkv.data(), DType::kF32, {3 * hidden, hidden}),
      tbqkv(bqkv.data(), DType::kF32, {3 * hidden}), two(wo.data(), DType::kF32, {hidden, hidden}),
      tbo(bo.data(), DType::kF32, {hidden});

  auto block = [&](const Tensor& w_qkv, const Tensor& b_qkv, const Tensor& w_o, const Tensor* b_o, int64_t h,
                   std::vector<float>& y) {
    const int64_t width = h * head_dim;
    std::vector<float> qkv(rows * 3 * width), ctx(rows * width);
    Tensor tqkv(qkv.data(), DType::kF32, {rows, 3 * width});
    kernels::linear(tx, w_qkv, &b_qkv, tqkv);
    const Tensor q3 = tqkv.reshape({batch, seq, 3 * width});
    const Tensor q = q3.slice_cols(0, width), k = q3.slice_cols(width, 2 * width),
                 v = q3.slice_cols(2 * width, 3 * width);
    Tensor tctx(ctx.data(), DType::kF32, {batch, seq, width});
    kernels::attention(q, k, v, tctx, h, scale, mask);
    y.assign(rows * hidden, 0.0f);
    Tensor ty(y.data(), DType::kF32, {rows, hidden});
    kernels::linear(tctx.reshape({rows, width}), w_o, b_o, ty);
  };

  std::vector<float> whole;
  block(twqkv, tbqkv, two, &tbo, heads, whole);

  const TpLayerPlan plan = clip_encoder_layer_plan(heads);
  for (int64_t world : {1, 2, 4}) {
    ASSERT_TRUE(validate_tp_plan(plan, world).ok());
    std::vector<float> sum(rows * hidden, 0.0f);
    for (int64_t r = 0; r < world; ++r) {
      HostTensor sq = slice_ok(twqkv, *tp_rule_for(plan, "self_attn.qkv.weight"), heads, world, r);
      HostTensor sqb = slice_ok(tbqkv, *tp_rule_for(plan, "self_attn.qkv.bias"), heads, world, r);
      HostTensor so = slice_ok(two, *tp_rule_for(plan, "self_attn.out_proj.weight"), heads, world, r);
      HostTensor sob = slice_ok(tbo, *tp_rule_for(plan, "self_attn.out_proj.bias"), heads, world, r);
      const Tensor bob = view_of(sob);
      std::vector<float> part;
      block(sq.view(), sqb.view(), so.view(), sob.empty() ? nullptr : &bob, heads / world, part);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    EXPECT_LE(max_abs_diff(sum, whole), 1e-5f) << "T=" << world;
  }
}

TEST(TensorParallel, BadPlansAreClearErrors) {
  Status s = validate_tp_plan(clip_encoder_layer_plan(12), 5);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("clip.encoder_layer"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("12"), std::string::npos) << s.message();

  s = validate_tp_plan(whisper_decoder_layer_plan(20), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("whisper.decoder_layer"), std::string::npos) << s.message();
  EXPECT_TRUE(validate_tp_plan(whisper_decoder_layer_plan(20), 4).ok());

  std::vector<float> w = random_floats(12 * 6, 13);
  const Tensor tw(w.data(), DType::kF32, {12, 6});
  EXPECT_EQ(tp_slice(tw, TpSplit::kColumn, 0, 0, 0, "w").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(tw, TpSplit::kColumn, 0, 2, 2, "w").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(tw, TpSplit::kColumn, 0, 2, -1, "w").status().code(), StatusCode::kInvalidArgument);
  // 3 heads over 2 ranks; 12 rows are not 5 heads; a fused QKV needs 3 x heads rows.
  StatusOr<HostTensor> bad = tp_slice(tw, TpSplit::kColumnHeads, 3, 2, 0, "layers.0.q_proj.weight");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("layers.0.q_proj.weight"), std::string::npos) << bad.status().message();
  EXPECT_EQ(tp_slice(tw, TpSplit::kColumnHeads, 5, 1, 0, "q").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(tw, TpSplit::kFusedQkvHeads, 8, 2, 0, "qkv").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tp_slice(tw, TpSplit::kColumnHeads, 0, 1, 0, "q").status().code(), StatusCode::kInvalidArgument);
  // Shapes: a 3-D tensor cannot be column-split; a 1-D tensor cannot be row-split.
  const Tensor t3(w.data(), DType::kF32, {2, 6, 6});
  EXPECT_EQ(tp_slice(t3, TpSplit::kColumn, 0, 2, 0, "conv").status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(tp_slice(t3, TpSplit::kReplicated, 0, 2, 1, "conv").ok());
  const Tensor t1(w.data(), DType::kF32, {12});
  EXPECT_EQ(tp_slice(t1, TpSplit::kRow, 0, 2, 0, "b").status().code(), StatusCode::kInvalidArgument);
  // Packed int4 is not sliced; a tensor without data is an error, not a crash.
  const Tensor packed(w.data(), DType::kI4Packed, {4, 8});
  EXPECT_EQ(tp_slice(packed, TpSplit::kColumn, 0, 2, 0, "q4").status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(tp_slice(Tensor(), TpSplit::kColumn, 0, 2, 0, "none").status().code(), StatusCode::kInvalidArgument);
  // A tensor the plan does not know.
  StatusOr<TpSplit> rule = tp_rule_for(clip_encoder_layer_plan(4), "mlp.fc3.weight");
  EXPECT_EQ(rule.status().code(), StatusCode::kNotFound);
  EXPECT_NE(rule.status().message().find("mlp.fc3.weight"), std::string::npos);
}

TEST(TensorParallel, PlansSplitTheExpectedLinears) {
  const TpLayerPlan clip = clip_encoder_layer_plan(4);
  EXPECT_EQ(*tp_rule_for(clip, "self_attn.q_proj.weight"), TpSplit::kColumnHeads);
  EXPECT_EQ(*tp_rule_for(clip, "self_attn.out_proj.weight"), TpSplit::kRowHeads);
  EXPECT_EQ(*tp_rule_for(clip, "self_attn.out_proj.bias"), TpSplit::kRowBias);
  EXPECT_EQ(*tp_rule_for(clip, "mlp.fc1.weight"), TpSplit::kColumn);
  EXPECT_EQ(*tp_rule_for(clip, "mlp.fc2.weight"), TpSplit::kRow);
  EXPECT_EQ(*tp_rule_for(clip, "layer_norm1.weight"), TpSplit::kReplicated);
  const TpLayerPlan dec = whisper_decoder_layer_plan(4);
  EXPECT_EQ(*tp_rule_for(dec, "encoder_attn.k_proj.weight"), TpSplit::kColumnHeads);
  EXPECT_EQ(*tp_rule_for(dec, "encoder_attn.out_proj.weight"), TpSplit::kRowHeads);
  EXPECT_FALSE(tp_rule_for(dec, "self_attn.k_proj.bias").ok()) << "Whisper's k_proj has no bias";
  EXPECT_EQ(*tp_rule_for(whisper_model_globals_plan(), "proj_out.weight"), TpSplit::kReplicated);
}

// Every tensor of the real fixtures has a rule, and slicing the whole checkpoint at T = 2 succeeds in its stored
// dtype (bf16 CLIP, f32 and f16 Whisper) with the rank shards' bytes adding up to the replicated and split sizes.
void check_fixture(const std::string& dir, const std::vector<std::pair<std::string, TpLayerPlan>>& layer_plans,
                   const TpLayerPlan& globals, int64_t world) {
  SCOPED_TRACE(dir);
  StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::open_model_dir(dir);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const std::regex layer_re(R"(^(.*\.layers)\.\d+\.(.*)$)");
  int sliced = 0;
  for (const std::string& name : (*store)->names()) {
    const TpLayerPlan* plan = &globals;
    std::string local = name;
    std::smatch m;
    if (std::regex_match(name, m, layer_re)) {
      plan = nullptr;
      for (const auto& [prefix, p] : layer_plans) {
        if (m[1].str() == prefix) plan = &p;
      }
      ASSERT_NE(plan, nullptr) << "no layer plan for " << name;
      local = m[2].str();
    }
    ASSERT_TRUE(validate_tp_plan(*plan, world).ok());
    StatusOr<TpSplit> rule = tp_rule_for(*plan, local);
    ASSERT_TRUE(rule.ok()) << rule.status().to_string();
    const Tensor t = (*store)->find(name)->view();
    size_t total = 0;
    for (int64_t r = 0; r < world; ++r) {
      StatusOr<HostTensor> s = tp_slice(t, *rule, plan->heads, world, r, name);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      EXPECT_EQ(s->dtype, t.dtype());
      total += s->bytes.size();
    }
    const size_t expect = *rule == TpSplit::kReplicated ? t.nbytes() * world : t.nbytes();
    EXPECT_EQ(total, expect) << name;
    ++sliced;
  }
  EXPECT_GT(sliced, 20);
}

TEST(TensorParallel, PlansCoverTheClipAndWhisperFixtures) {
  const std::string fixtures = MMSERVE_FIXTURES_DIR;
  // CLIP: 4 heads in both towers.
  check_fixture(fixtures + "/clip-tiny-gelu-bf16",
                {{"vision_model.encoder.layers", clip_encoder_layer_plan(4)},
                 {"text_model.encoder.layers", clip_encoder_layer_plan(4)}},
                clip_model_globals_plan(), 2);
  // Whisper (heads from each config.json): tiny 2 / 2, v3 4 encoder / 2 decoder.
  for (auto [model, encoder_heads] :
       std::vector<std::pair<std::string, int64_t>>{{"whisper-tiny-mel80-f32", 2}, {"whisper-v3-mel128-f16", 4}}) {
    check_fixture(fixtures + "/whisper/" + model,
                  {{"model.encoder.layers", whisper_encoder_layer_plan(encoder_heads)},
                   {"model.decoder.layers", whisper_decoder_layer_plan(2)}},
                  whisper_model_globals_plan(), 2);
  }
}

}  // namespace
}  // namespace mmserve::models
