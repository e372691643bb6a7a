// Whisper forward code, following HF transformers' modeling_whisper.py (WhisperForConditionalGeneration).
//
//   encoder: gelu(conv1(mel)) -> gelu(conv2(.), stride 2) -> [frames, d] + embed_positions[:frames]
//            -> N pre-LN blocks (full attention) -> layer_norm
//   decoder: embed_tokens(ids) + embed_positions[past:past+n] -> N layers of
//              x += self_attn(self_attn_layer_norm(x))        causal, over the KV cache
//              x += encoder_attn(encoder_attn_layer_norm(x))  over the encoder output (K/V computed once)
//              x += fc2(gelu(fc1(final_layer_norm(x))))
//            -> layer_norm -> logits = h @ embed_tokens^T (proj_out, tied)
//
// HF scales q by head_dim^-0.5 before q.k; here the attention kernel applies the same scale to the product.
// The convolutions are im2col + one GEMM each (the GEMM's fused epilogue adds the bias and applies gelu), laid
// out time-major so that conv2's output is already HF's permuted [frames, d].
#include "models/whisper/whisper.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/arena.h"
#include "core/safetensors.h"
#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/layer_norm/layer_norm.h"

namespace mmserve::models {
namespace {

using kernels::Activation;

constexpr int64_t kConvKernel = 3;

Tensor view(const std::vector<float>& data, const std::vector<int64_t>& shape, int64_t offset = 0) {
  return Tensor(const_cast<float*>(data.data()) + offset, DType::kF32, shape);
}

// cols[t, c * 3 + k] = x(c, t * stride + k - 1), zero outside [0, length): the im2col of a kernel-3, padding-1
// conv1d. x(c, i) = x[c * stride_c + i * stride_i], so channel-major and time-major inputs both work.
void conv1d_im2col(const float* x, int64_t channels, int64_t length, int64_t stride_c, int64_t stride_i, int64_t stride,
                   int64_t frames_out, float* cols) {
  for (int64_t t = 0; t < frames_out; ++t) {
    float* row = cols + t * channels * kConvKernel;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t k = 0; k < kConvKernel; ++k) {
        const int64_t i = t * stride + k - 1;
        row[c * kConvKernel + k] = (i >= 0 && i < length) ? x[c * stride_c + i * stride_i] : 0.0f;
      }
    }
  }
}

Status require_positive(const std::string& label, const char* key, int64_t value) {
  if (value <= 0) return invalid_argument(label + "." + key + " must be positive, got " + std::to_string(value));
  return ok_status();
}

}  // namespace

int64_t whisper_encoder_frames(int64_t mel_frames) {
  return mel_frames <= 0 ? 0 : (mel_frames - 1) / 2 + 1;  // floor((T + 2 * 1 - 3) / 2) + 1
}

StatusOr<WhisperConfig> parse_whisper_config(const nlohmann::json& json, const std::string& label) {
  ASSIGN_OR_RETURN(JsonObject o, JsonObject::wrap(json, label));
  WhisperConfig c;
  ASSIGN_OR_RETURN(c.vocab_size, o.get_int_or("vocab_size", c.vocab_size));
  ASSIGN_OR_RETURN(c.num_mel_bins, o.get_int_or("num_mel_bins", c.num_mel_bins));
  ASSIGN_OR_RETURN(c.d_model, o.get_int_or("d_model", c.d_model));
  ASSIGN_OR_RETURN(c.encoder_layers, o.get_int_or("encoder_layers", c.encoder_layers));
  ASSIGN_OR_RETURN(c.encoder_attention_heads, o.get_int_or("encoder_attention_heads", c.encoder_attention_heads));
  ASSIGN_OR_RETURN(c.encoder_ffn_dim, o.get_int_or("encoder_ffn_dim", c.encoder_ffn_dim));
  ASSIGN_OR_RETURN(c.decoder_layers, o.get_int_or("decoder_layers", c.decoder_layers));
  ASSIGN_OR_RETURN(c.decoder_attention_heads, o.get_int_or("decoder_attention_heads", c.decoder_attention_heads));
  ASSIGN_OR_RETURN(c.decoder_ffn_dim, o.get_int_or("decoder_ffn_dim", c.decoder_ffn_dim));
  ASSIGN_OR_RETURN(c.max_source_positions, o.get_int_or("max_source_positions", c.max_source_positions));
  ASSIGN_OR_RETURN(c.max_target_positions, o.get_int_or("max_target_positions", c.max_target_positions));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, o.get_bool_or("tie_word_embeddings", c.tie_word_embeddings));
  ASSIGN_OR_RETURN(c.decoder_start_token_id, o.get_int_or("decoder_start_token_id", c.decoder_start_token_id));
  ASSIGN_OR_RETURN(c.pad_token_id, o.get_int_or("pad_token_id", c.pad_token_id));
  ASSIGN_OR_RETURN(c.eos_token_id, o.get_int_or("eos_token_id", c.eos_token_id));
  ASSIGN_OR_RETURN(std::string act, o.get_string_or("activation_function", "gelu"));
  auto parsed = kernels::activation_from_hf_name(act);
  if (!parsed) return unimplemented(label + ".activation_function: unsupported activation '" + act + "'");
  c.activation_function = *parsed;
  ASSIGN_OR_RETURN(bool scale_embedding, o.get_bool_or("scale_embedding", false));
  if (scale_embedding) return unimplemented(label + ".scale_embedding: true is not supported");
  for (auto [key, value] : {std::pair{"vocab_size", c.vocab_size},
                            {"num_mel_bins", c.num_mel_bins},
                            {"d_model", c.d_model},
                            {"encoder_layers", c.encoder_layers},
                            {"encoder_attention_heads", c.encoder_attention_heads},
                            {"encoder_ffn_dim", c.encoder_ffn_dim},
                            {"decoder_layers", c.decoder_layers},
                            {"decoder_attention_heads", c.decoder_attention_heads},
                            {"decoder_ffn_dim", c.decoder_ffn_dim},
                            {"max_source_positions", c.max_source_positions},
                            {"max_target_positions", c.max_target_positions}}) {
    RETURN_IF_ERROR(require_positive(label, key, value));
  }
  for (auto [key, heads] : {std::pair{"encoder_attention_heads", c.encoder_attention_heads},
                            {"decoder_attention_heads", c.decoder_attention_heads}}) {
    if (c.d_model % heads != 0) {
      return invalid_argument(label + ": d_model " + std::to_string(c.d_model) + " is not divisible by " + key + " " +
                              std::to_string(heads));
    }
  }
  return c;
}

std::vector<WeightSpec> whisper_weight_specs(const WhisperConfig& c) {
  std::vector<WeightSpec> specs;
  const int64_t d = c.d_model;
  auto linear = [&specs](const std::string& name, int64_t out, int64_t in, bool bias = true) {
    specs.push_back({name + ".weight", {out, in}});
    if (bias) specs.push_back({name + ".bias", {out}});
  };
  auto norm = [&specs](const std::string& name, int64_t dim) {
    specs.push_back({name + ".weight", {dim}});
    specs.push_back({name + ".bias", {dim}});
  };
  auto attention = [&](const std::string& p) {
    linear(p + ".q_proj", d, d);
    linear(p + ".k_proj", d, d, /*bias=*/false);
    linear(p + ".v_proj", d, d);
    linear(p + ".out_proj", d, d);
  };
  specs.push_back({"model.encoder.conv1.weight", {d, c.num_mel_bins, kConvKernel}});
  specs.push_back({"model.encoder.conv1.bias", {d}});
  specs.push_back({"model.encoder.conv2.weight", {d, d, kConvKernel}});
  specs.push_back({"model.encoder.conv2.bias", {d}});
  specs.push_back({"model.encoder.embed_positions.weight", {c.max_source_positions, d}});
  for (int64_t i = 0; i < c.encoder_layers; ++i) {
    const std::string p = "model.encoder.layers." + std::to_string(i);
    attention(p + ".self_attn");
    norm(p + ".self_attn_layer_norm", d);
    linear(p + ".fc1", c.encoder_ffn_dim, d);
    linear(p + ".fc2", d, c.encoder_ffn_dim);
    norm(p + ".final_layer_norm", d);
  }
  norm("model.encoder.layer_norm", d);
  specs.push_back({"model.decoder.embed_tokens.weight", {c.vocab_size, d}});
  specs.push_back({"model.decoder.embed_positions.weight", {c.max_target_positions, d}});
  for (int64_t i = 0; i < c.decoder_layers; ++i) {
    const std::string p = "model.decoder.layers." + std::to_string(i);
    attention(p + ".self_attn");
    norm(p + ".self_attn_layer_norm", d);
    attention(p + ".encoder_attn");
    norm(p + ".encoder_attn_layer_norm", d);
    linear(p + ".fc1", c.decoder_ffn_dim, d);
    linear(p + ".fc2", d, c.decoder_ffn_dim);
    norm(p + ".final_layer_norm", d);
  }
  norm("model.decoder.layer_norm", d);
  // Tied to embed_tokens: save_pretrained usually leaves it out; when present and tied, HF uses embed_tokens.
  specs.push_back({"proj_out.weight", {c.vocab_size, d}, /*optional=*/c.tie_word_embeddings});
  return specs;
}

StatusOr<std::unique_ptr<WhisperModel>> WhisperModel::load(const std::string& model_dir) {
  const std::string config_path = (std::filesystem::path(model_dir) / "config.json").string();
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  auto model = std::unique_ptr<WhisperModel>(new WhisperModel());
  ASSIGN_OR_RETURN(model->config_, parse_whisper_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
  const std::vector<WeightSpec> specs = whisper_weight_specs(model->config_);
  RETURN_IF_ERROR(check_weights(*store, specs).with_context(model_dir));
  ASSIGN_OR_RETURN(model->weights_, F32Weights::load(*store, specs));
  model->bind_weights();
  return model;
}

void WhisperModel::bind_weights() {
  const int64_t d = config_.d_model;
  // q, k, v fused into one [3d, d] matrix; k_proj has no bias, so its part of the fused bias is zero.
  auto fused_qkv = [&](const std::string& p, EncoderBlockWeights& w) {
    w.qkv_weight = weights_->add_owned(p + ".qkv.weight", {3 * d, d});
    w.qkv_bias = weights_->add_owned(p + ".qkv.bias", {3 * d});
    float* wq = w.qkv_weight.data_as<float>();
    float* bq = w.qkv_bias.data_as<float>();
    std::memcpy(wq, weights_->get(p + ".q_proj.weight").data(), d * d * sizeof(float));
    std::memcpy(wq + d * d, weights_->get(p + ".k_proj.weight").data(), d * d * sizeof(float));
    std::memcpy(wq + 2 * d * d, weights_->get(p + ".v_proj.weight").data(), d * d * sizeof(float));
    std::memcpy(bq, weights_->get(p + ".q_proj.bias").data(), d * sizeof(float));
    std::fill(bq + d, bq + 2 * d, 0.0f);
    std::memcpy(bq + 2 * d, weights_->get(p + ".v_proj.bias").data(), d * sizeof(float));
    w.out_weight = weights_->get(p + ".out_proj.weight");
    w.out_bias = weights_->get(p + ".out_proj.bias");
  };
  auto block = [&](const std::string& p) {
    EncoderBlockWeights w;
    fused_qkv(p + ".self_attn", w);
    w.ln1_weight = weights_->get(p + ".self_attn_layer_norm.weight");
    w.ln1_bias = weights_->get(p + ".self_attn_layer_norm.bias");
    w.ln2_weight = weights_->get(p + ".final_layer_norm.weight");
    w.ln2_bias = weights_->get(p + ".final_layer_norm.bias");
    w.fc1_weight = weights_->get(p + ".fc1.weight");
    w.fc1_bias = weights_->get(p + ".fc1.bias");
    w.fc2_weight = weights_->get(p + ".fc2.weight");
    w.fc2_bias = weights_->get(p + ".fc2.bias");
    return w;
  };
  for (int64_t i = 0; i < config_.encoder_layers; ++i) {
    encoder_blocks_.push_back(block("model.encoder.layers." + std::to_string(i)));
  }
  for (int64_t i = 0; i < config_.decoder_layers; ++i) {
    const std::string p = "model.decoder.layers." + std::to_string(i);
    WhisperDecoderLayerWeights w;
    w.self = block(p);
    auto get = [&](const std::string& name) { return weights_->get(p + name); };
    w.cross_ln_weight = get(".encoder_attn_layer_norm.weight");
    w.cross_ln_bias = get(".encoder_attn_layer_norm.bias");
    w.cross_q_weight = get(".encoder_attn.q_proj.weight");
    w.cross_q_bias = get(".encoder_attn.q_proj.bias");
    w.cross_k_weight = get(".encoder_attn.k_proj.weight");
    w.cross_v_weight = get(".encoder_attn.v_proj.weight");
    w.cross_v_bias = get(".encoder_attn.v_proj.bias");
    w.cross_out_weight = get(".encoder_attn.out_proj.weight");
    w.cross_out_bias = get(".encoder_attn.out_proj.bias");
    decoder_layers_.push_back(w);
  }
  lm_head_ = config_.tie_word_embeddings ? weights_->get("model.decoder.embed_tokens.weight")
                                         : weights_->get("proj_out.weight");
}

Status WhisperModel::encode(const Tensor& mel, std::vector<float>& encoder_out, const TraceFn& trace) const {
  const WhisperConfig& c = config_;
  if (mel.dims() != 3 || mel.size(1) != c.num_mel_bins || mel.dtype() != DType::kF32 || !mel.is_contiguous()) {
    return invalid_argument("input_features must be contiguous f32 [batch, " + std::to_string(c.num_mel_bins) +
                            ", frames], got " + mel.shape_string());
  }
  const int64_t batch = mel.size(0), mel_frames = mel.size(2), d = c.d_model;
  if (mel_frames < 1 || mel_frames > 2 * c.max_source_positions) {
    return invalid_argument("input_features has " + std::to_string(mel_frames) + " frames; the encoder takes 1 to " +
                            std::to_string(2 * c.max_source_positions));
  }
  const int64_t frames = whisper_encoder_frames(mel_frames), rows = batch * frames;
  encoder_out.assign(static_cast<size_t>(rows * d), 0.0f);
  if (batch == 0) return ok_status();
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };

  const EncoderBlockConfig bc{d, c.encoder_attention_heads, c.encoder_ffn_dim, c.layer_norm_eps, c.activation_function};
  const int64_t cols_floats = std::max(mel_frames * c.num_mel_bins, frames * d) * kConvKernel;
  const int64_t block_floats = encoder_block_scratch_floats(bc, rows);
  Arena arena(static_cast<size_t>(cols_floats + mel_frames * d + block_floats) * sizeof(float) + 4 * Arena::kAlignment);
  ASSIGN_OR_RETURN(Tensor cols, arena.allocate_tensor(DType::kF32, {cols_floats}));
  ASSIGN_OR_RETURN(Tensor conv1_out, arena.allocate_tensor(DType::kF32, {mel_frames, d}));
  ASSIGN_OR_RETURN(Tensor scratch_floats, arena.allocate_tensor(DType::kF32, {block_floats}));

  // Convolutions, one batch row at a time: conv1 reads the channel-major mel, conv2 the time-major conv1 output.
  const Tensor conv1_w = weights_->get("model.encoder.conv1.weight").reshape({d, c.num_mel_bins * kConvKernel});
  const Tensor conv1_b = weights_->get("model.encoder.conv1.bias");
  const Tensor conv2_w = weights_->get("model.encoder.conv2.weight").reshape({d, d * kConvKernel});
  const Tensor conv2_b = weights_->get("model.encoder.conv2.bias");
  const Tensor positions = weights_->get("model.encoder.embed_positions.weight").slice_rows(0, frames);
  Tensor x = view(encoder_out, {batch, frames, d});
  for (int64_t b = 0; b < batch; ++b) {
    const float* mel_b = mel.data_as<float>() + b * c.num_mel_bins * mel_frames;
    conv1d_im2col(mel_b, c.num_mel_bins, mel_frames, mel_frames, 1, 1, mel_frames, cols.data_as<float>());
    Tensor cols1(cols.data(), DType::kF32, {mel_frames, c.num_mel_bins * kConvKernel});
    kernels::linear(cols1, conv1_w, &conv1_b, conv1_out, Activation::kGelu);
    dump("encoder.conv1." + std::to_string(b), conv1_out);
    conv1d_im2col(conv1_out.data_as<float>(), d, mel_frames, 1, d, 2, frames, cols.data_as<float>());
    Tensor cols2(cols.data(), DType::kF32, {frames, d * kConvKernel});
    Tensor xb = x.slice_rows(b, b + 1).reshape({frames, d});
    kernels::linear(cols2, conv2_w, &conv2_b, xb, Activation::kGelu);
    dump("encoder.conv2." + std::to_string(b), xb);
    kernels::add(xb, positions, xb);
  }
  Tensor x2 = x.reshape({rows, d});
  dump("encoder.embeddings", x2);

  EncoderBlockScratch scratch = make_encoder_block_scratch(bc, rows, scratch_floats.data_as<float>());
  const kernels::AttentionMask full;
  for (size_t i = 0; i < encoder_blocks_.size(); ++i) {
    encoder_block_forward(bc, encoder_blocks_[i], x, full, scratch, trace, "encoder.layers." + std::to_string(i) + ".");
  }
  kernels::layer_norm(x2, weights_->get("model.encoder.layer_norm.weight"),
                      weights_->get("model.encoder.layer_norm.bias"), c.layer_norm_eps, x2);
  dump("encoder.last_hidden_state", x2);
  return ok_status();
}

StatusOr<WhisperDecoderState> WhisperModel::start_decoder(const std::vector<float>& encoder_out, int64_t batch,
                                                          int64_t frames, int64_t capacity) const {
  const int64_t d = config_.d_model;
  if (batch < 1 || frames < 1 || static_cast<int64_t>(encoder_out.size()) != batch * frames * d) {
    return invalid_argument("encoder output holds " + std::to_string(encoder_out.size()) + " floats, not [" +
                            std::to_string(batch) + ", " + std::to_string(frames) + ", " + std::to_string(d) + "]");
  }
  if (capacity < 1 || capacity > config_.max_target_positions) {
    return invalid_argument("decoder capacity " + std::to_string(capacity) + " is outside 1.." +
                            std::to_string(config_.max_target_positions) + " (max_target_positions)");
  }
  WhisperDecoderState s;
  s.batch = batch;
  s.frames = frames;
  s.capacity = capacity;
  const Tensor enc = view(encoder_out, {batch * frames, d});
  for (const WhisperDecoderLayerWeights& w : decoder_layers_) {
    s.self_k.emplace_back(static_cast<size_t>(batch * capacity * d), 0.0f);
    s.self_v.emplace_back(static_cast<size_t>(batch * capacity * d), 0.0f);
    s.cross_k.emplace_back(static_cast<size_t>(batch * frames * d));
    s.cross_v.emplace_back(static_cast<size_t>(batch * frames * d));
    Tensor k = view(s.cross_k.back(), {batch * frames, d});
    Tensor v = view(s.cross_v.back(), {batch * frames, d});
    kernels::linear(enc, w.cross_k_weight, nullptr, k);
    kernels::linear(enc, w.cross_v_weight, &w.cross_v_bias, v);
  }
  return s;
}

Status WhisperDecoderState::reorder(const std::vector<int64_t>& src) {
  for (int64_t r : src) {
    if (r < 0 || r >= batch) {
      return invalid_argument("decoder row " + std::to_string(r) + " is outside 0.." + std::to_string(batch - 1));
    }
  }
  const int64_t rows = static_cast<int64_t>(src.size());
  // Every layer's buffers are gathered into fresh ones: a permutation in place would need a cycle walk, and
  // the copy is small next to one decoder step.
  auto gather = [&](std::vector<float>& buffer, int64_t per_row) {
    std::vector<float> out(static_cast<size_t>(rows * per_row));
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(out.data() + i * per_row, buffer.data() + src[i] * per_row, per_row * sizeof(float));
    }
    buffer.swap(out);
  };
  const int64_t d =
      self_k.empty() ? 0 : static_cast<int64_t>(self_k[0].size()) / std::max<int64_t>(batch * capacity, 1);
  for (size_t l = 0; l < self_k.size(); ++l) {
    gather(self_k[l], capacity * d);
    gather(self_v[l], capacity * d);
    gather(cross_k[l], frames * d);
    gather(cross_v[l], frames * d);
  }
  batch = rows;
  return ok_status();
}

Status WhisperModel::check_ids(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(config_.vocab_size) + ")");
    }
  }
  return ok_status();
}

Status WhisperModel::prefill(WhisperDecoderState& state, const std::vector<std::vector<int32_t>>& ids,
                             std::vector<float>& logits, const TraceFn& trace) const {
  const WhisperConfig& c = config_;
  const int64_t batch = state.batch, d = c.d_model, past = state.length;
  if (static_cast<int64_t>(ids.size()) != batch || ids.empty() || ids[0].empty()) {
    return invalid_argument("decoder input must hold " + std::to_string(batch) + " non-empty rows");
  }
  const int64_t n = static_cast<int64_t>(ids[0].size()), rows = batch * n, total = past + n;
  for (const std::vector<int32_t>& row : ids) {
    if (static_cast<int64_t>(row.size()) != n) return invalid_argument("decoder input rows differ in length");
    RETURN_IF_ERROR(check_ids(row));
  }
  if (total > state.capacity) {
    return out_of_range("decoder sequence of " + std::to_string(total) + " tokens exceeds the state's capacity " +
                        std::to_string(state.capacity));
  }
  auto dump = [&trace](const std::string& name, const Tensor& t) {
    if (trace) trace(name, t);
  };

  // Activations for this call (small: n new tokens per row).
  std::vector<float> x_buf(rows * d), normed_buf(rows * d), qkv_buf(rows * 3 * d), ctx_buf(rows * d);
  std::vector<float> mlp_buf(rows * c.decoder_ffn_dim);
  Tensor x = view(x_buf, {rows, d}), normed = view(normed_buf, {rows, d}), qkv = view(qkv_buf, {rows, 3 * d});
  Tensor ctx = view(ctx_buf, {rows, d}), mlp = view(mlp_buf, {rows, c.decoder_ffn_dim});

  // Embeddings: embed_tokens(ids) + embed_positions[past : past + n].
  const Tensor token_table = weights_->get("model.decoder.embed_tokens.weight");
  const Tensor positions = weights_->get("model.decoder.embed_positions.weight").slice_rows(past, total);
  for (int64_t b = 0; b < batch; ++b) {
    Tensor xb = x.slice_rows(b * n, (b + 1) * n);
    kernels::embedding(token_table, ids[b].data(), n, xb);
    kernels::add(xb, positions, xb);
  }
  dump("decoder.embeddings", x);

  const int64_t heads = c.decoder_attention_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d / heads));
  kernels::AttentionMask causal;
  causal.causal = true;  // offset total - n: each new token sees the whole cached past and itself
  const kernels::AttentionMask full;
  for (size_t li = 0; li < decoder_layers_.size(); ++li) {
    const WhisperDecoderLayerWeights& w = decoder_layers_[li];
    const std::string prefix = "decoder.layers." + std::to_string(li) + ".";

    // Self-attention over the cache: append this call's k and v, then attend row by row.
    kernels::layer_norm(x, w.self.ln1_weight, w.self.ln1_bias, c.layer_norm_eps, normed);
    kernels::linear(normed, w.self.qkv_weight, &w.self.qkv_bias, qkv);
    float* cache_k = state.self_k[li].data();
    float* cache_v = state.self_v[li].data();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < n; ++t) {
        const float* src = qkv_buf.data() + (b * n + t) * 3 * d;
        std::memcpy(cache_k + (b * state.capacity + past + t) * d, src + d, d * sizeof(float));
        std::memcpy(cache_v + (b * state.capacity + past + t) * d, src + 2 * d, d * sizeof(float));
      }
      Tensor qkv_b = qkv.slice_rows(b * n, (b + 1) * n).reshape({1, n, 3 * d});
      Tensor q = qkv_b.slice_cols(0, d);
      Tensor k(cache_k + b * state.capacity * d, DType::kF32, {1, total, d});
      Tensor v(cache_v + b * state.capacity * d, DType::kF32, {1, total, d});
      Tensor out = ctx.slice_rows(b * n, (b + 1) * n).reshape({1, n, d});
      kernels::attention(q, k, v, out, heads, scale, causal);
    }
    kernels::linear(ctx, w.self.out_weight, &w.self.out_bias, x, Activation::kNone, /*accumulate=*/true);
    dump(prefix + "self_attn_residual", x);

    // Cross-attention over the encoder output (K/V from start_decoder()).
    kernels::layer_norm(x, w.cross_ln_weight, w.cross_ln_bias, c.layer_norm_eps, normed);
    Tensor q = view(qkv_buf, {rows, d});  // reuses the qkv buffer
    kernels::linear(normed, w.cross_q_weight, &w.cross_q_bias, q);
    Tensor ctx3 = ctx.reshape({batch, n, d});
    kernels::attention(q.reshape({batch, n, d}), view(state.cross_k[li], {batch, state.frames, d}),
                       view(state.cross_v[li], {batch, state.frames, d}), ctx3, heads, scale, full);
    kernels::linear(ctx, w.cross_out_weight, &w.cross_out_bias, x, Activation::kNone, /*accumulate=*/true);
    dump(prefix + "encoder_attn_residual", x);

    // MLP.
    kernels::layer_norm(x, w.self.ln2_weight, w.self.ln2_bias, c.layer_norm_eps, normed);
    kernels::linear(normed, w.self.fc1_weight, &w.self.fc1_bias, mlp, c.activation_function);
    kernels::linear(mlp, w.self.fc2_weight, &w.self.fc2_bias, x, Activation::kNone, /*accumulate=*/true);
    dump(prefix + "out", x);
  }
  kernels::layer_norm(x, weights_->get("model.decoder.layer_norm.weight"),
                      weights_->get("model.decoder.layer_norm.bias"), c.layer_norm_eps, x);
  dump("decoder.last_hidden_state", x);

  // Logits of each row's last position: h @ embed_tokens^T.
  std::vector<int64_t> last(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) last[b] = b * n + n - 1;
  Tensor h = view(normed_buf, {batch, d});
  kernels::gather_rows(x, last.data(), batch, h);
  logits.assign(static_cast<size_t>(batch * c.vocab_size), 0.0f);
  Tensor out = view(logits, {batch, c.vocab_size});
  kernels::linear(h, lm_head_, nullptr, out);
  dump("logits", out);
  state.length = total;
  return ok_status();
}

Status WhisperModel::step(WhisperDecoderState& state, const std::vector<int32_t>& tokens,
                          std::vector<float>& logits) const {
  std::vector<std::vector<int32_t>> ids;
  for (int32_t t : tokens) ids.push_back({t});
  return prefill(state, ids, logits);
}

StatusOr<std::vector<int32_t>> WhisperModel::greedy(const Tensor& mel, const std::vector<int32_t>& prompt,
                                                    int64_t max_new_tokens, int64_t eos) const {
  if (mel.dims() != 3 || mel.size(0) != 1) return invalid_argument("greedy() takes one mel [1, mels, frames]");
  if (prompt.empty()) return invalid_argument("greedy() needs a non-empty prompt");
  if (max_new_tokens < 1) return invalid_argument("max_new_tokens must be positive");
  // The last new token is never fed back, so the cache needs prompt + max_new_tokens - 1 rows.
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + max_new_tokens - 1;
  if (capacity > config_.max_target_positions) {
    return invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens + max_new_tokens " +
                            std::to_string(max_new_tokens) + " exceeds max_target_positions " +
                            std::to_string(config_.max_target_positions));
  }
  std::vector<float> encoder_out, logits;
  RETURN_IF_ERROR(encode(mel, encoder_out));
  const int64_t frames = whisper_encoder_frames(mel.size(2));
  ASSIGN_OR_RETURN(WhisperDecoderState state, start_decoder(encoder_out, 1, frames, capacity));
  RETURN_IF_ERROR(prefill(state, {prompt}, logits));
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == eos) break;
    tokens.push_back(next);
    if (i + 1 == max_new_tokens) break;
    RETURN_IF_ERROR(step(state, {next}, logits));
  }
  return tokens;
}

}  // namespace mmserve::models
