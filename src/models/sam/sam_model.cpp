// SamModel: loading (config, weight table, binding) and the two entry points, encode_images and decode.
//
// At load the weights are checked against sam_weight_specs() (every missing, unexpected and mis-shaped tensor
// reported at once), upcast to f32 and bound by name into SamWeights; a few tensors are derived then: the
// image-wide positional embedding (it depends on the weights only), the output tokens [iou_token; mask_tokens],
// and the neck and upscaling convolution weights permuted for channels-last GEMMs. decode() follows
// SamModel.forward with image_embeddings given: prompt encoder, dense prompt added to the embedding, mask
// decoder, then HF's multimask slicing (masks and IoU scores 1..N, else 0 alone).
// Tests: tests/conformance/sam_model_test.cpp.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/safetensors.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/gemm.h"
#include "models/sam/sam_internal.h"

namespace mmserve::models {
namespace {

constexpr const char* kSharedPe = "shared_image_embedding.positional_embedding";
constexpr const char* kPromptPe = "prompt_encoder.shared_embedding.positional_embedding";

// A typical prompt's token count for memory_bytes(): output tokens + one point + HF's pad point + a box.
constexpr int64_t kTypicalSparseTokens = 4;

class Binder {
 public:
  explicit Binder(F32Weights& weights) : weights_(weights) {}
  Tensor get(const std::string& name) const { return weights_.get(name); }
  SamNorm norm(const std::string& name) const { return {get(name + ".weight"), get(name + ".bias")}; }
  SamLinear linear(const std::string& name) const { return {get(name + ".weight"), get(name + ".bias")}; }
  // An embedding table of one row as a [hidden] vector.
  Tensor vector(const std::string& name) const {
    const Tensor t = get(name);
    return t.reshape({t.numel()});
  }
  SamAttentionWeights attention(const std::string& name) const {
    return {linear(name + ".q_proj"), linear(name + ".k_proj"), linear(name + ".v_proj"), linear(name + ".out_proj")};
  }
  // A Conv2d weight [out, in, kh, kw] as [out, (ky, kx, in)] columns, for im2col over channels-last rows.
  Tensor conv_channels_last(const std::string& name) const {
    const Tensor w = get(name);
    const int64_t out = w.size(0), in = w.size(1), kh = w.size(2), kw = w.size(3);
    Tensor p = weights_.add_owned(name + ".channels_last", {out, kh * kw * in});
    const float* src = w.data_as<float>();
    float* dst = p.data_as<float>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t c = 0; c < in; ++c)
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx)
            dst[o * kh * kw * in + (ky * kw + kx) * in + c] = src[((o * in + c) * kh + ky) * kw + kx];
    return p;
  }
  // A ConvTranspose2d weight [in, out, 2, 2] as [in, (dy, dx, out)] columns.
  Tensor conv_transpose_channels_last(const std::string& name) const {
    const Tensor w = get(name);
    const int64_t in = w.size(0), out = w.size(1);
    Tensor p = weights_.add_owned(name + ".channels_last", {in, 4 * out});
    const float* src = w.data_as<float>();
    float* dst = p.data_as<float>();
    for (int64_t c = 0; c < in; ++c)
      for (int64_t o = 0; o < out; ++o)
        for (int64_t d = 0; d < 4; ++d) dst[c * 4 * out + d * out + o] = src[(c * out + o) * 4 + d];
    return p;
  }
  F32Weights& weights() const { return weights_; }

 private:
  F32Weights& weights_;
};

SamVisionWeights bind_vision(const SamVisionConfig& c, const Binder& bind) {
  SamVisionWeights v;
  v.patch_weight = bind.get("vision_encoder.patch_embed.projection.weight");
  v.patch_bias = bind.get("vision_encoder.patch_embed.projection.bias");
  if (c.use_abs_pos) v.pos_embed = bind.get("vision_encoder.pos_embed").reshape({c.grid() * c.grid(), c.hidden_size});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "vision_encoder.layers." + std::to_string(i);
    SamVisionLayerWeights layer;
    EncoderBlockWeights& b = layer.block;
    b.ln1_weight = bind.get(l + ".layer_norm1.weight");
    b.ln1_bias = bind.get(l + ".layer_norm1.bias");
    b.qkv_weight = bind.get(l + ".attn.qkv.weight");  // HF's qkv is already fused: q rows, k rows, v rows
    b.qkv_bias = bind.get(l + ".attn.qkv.bias");      // empty when qkv_bias is false
    b.out_weight = bind.get(l + ".attn.proj.weight");
    b.out_bias = bind.get(l + ".attn.proj.bias");
    b.ln2_weight = bind.get(l + ".layer_norm2.weight");
    b.ln2_bias = bind.get(l + ".layer_norm2.bias");
    b.fc1_weight = bind.get(l + ".mlp.lin1.weight");
    b.fc1_bias = bind.get(l + ".mlp.lin1.bias");
    b.fc2_weight = bind.get(l + ".mlp.lin2.weight");
    b.fc2_bias = bind.get(l + ".mlp.lin2.bias");
    if (c.use_rel_pos) {
      layer.rel_pos_h = bind.get(l + ".attn.rel_pos_h");
      layer.rel_pos_w = bind.get(l + ".attn.rel_pos_w");
    }
    layer.window = c.layer_window(i);
    v.layers.push_back(layer);
  }
  v.neck_conv1 = bind.get("vision_encoder.neck.conv1.weight").reshape({c.output_channels, c.hidden_size});
  v.neck_norm1 = bind.norm("vision_encoder.neck.layer_norm1");
  v.neck_conv2 = bind.conv_channels_last("vision_encoder.neck.conv2.weight");
  v.neck_norm2 = bind.norm("vision_encoder.neck.layer_norm2");
  return v;
}

SamPromptWeights bind_prompt(const SamConfig& config, const Binder& bind) {
  const SamPromptEncoderConfig& c = config.prompt;
  SamPromptWeights p;
  p.positional_embedding = bind.get(bind.weights().has(kSharedPe) ? kSharedPe : kPromptPe);  // tied in HF
  const int64_t grid = c.image_embedding_size();
  p.image_pe = bind.weights().add_owned("image_positional_embeddings", {grid * grid, c.hidden_size});
  sam_image_positional_embedding(p.positional_embedding, grid, p.image_pe);
  p.mask_conv1_weight = bind.get("prompt_encoder.mask_embed.conv1.weight");
  p.mask_conv1_bias = bind.get("prompt_encoder.mask_embed.conv1.bias");
  p.mask_conv2_weight = bind.get("prompt_encoder.mask_embed.conv2.weight");
  p.mask_conv2_bias = bind.get("prompt_encoder.mask_embed.conv2.bias");
  p.mask_conv3 = {bind.get("prompt_encoder.mask_embed.conv3.weight").reshape({c.hidden_size, c.mask_input_channels}),
                  bind.get("prompt_encoder.mask_embed.conv3.bias")};
  p.mask_norm1 = bind.norm("prompt_encoder.mask_embed.layer_norm1");
  p.mask_norm2 = bind.norm("prompt_encoder.mask_embed.layer_norm2");
  p.no_mask_embed = bind.vector("prompt_encoder.no_mask_embed.weight");
  for (int64_t i = 0; i < c.num_point_embeddings; ++i) {
    p.point_embed.push_back(bind.vector("prompt_encoder.point_embed." + std::to_string(i) + ".weight"));
  }
  p.not_a_point_embed = bind.vector("prompt_encoder.not_a_point_embed.weight");
  return p;
}

std::vector<SamLinear> bind_feed_forward(const Binder& bind, const std::string& name, int64_t layers) {
  std::vector<SamLinear> out{bind.linear(name + ".proj_in")};
  for (int64_t i = 0; i + 2 < layers; ++i) out.push_back(bind.linear(name + ".layers." + std::to_string(i)));
  out.push_back(bind.linear(name + ".proj_out"));
  return out;
}

SamDecoderWeights bind_decoder(const SamMaskDecoderConfig& c, const Binder& bind) {
  SamDecoderWeights d;
  const int64_t hidden = c.hidden_size, mask_tokens = c.num_mask_tokens();
  d.output_tokens = bind.weights().add_owned("mask_decoder.output_tokens", {1 + mask_tokens, hidden});
  std::memcpy(d.output_tokens.data(), bind.get("mask_decoder.iou_token.weight").data(), hidden * sizeof(float));
  std::memcpy(d.output_tokens.data_as<float>() + hidden, bind.get("mask_decoder.mask_tokens.weight").data(),
              mask_tokens * hidden * sizeof(float));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "mask_decoder.transformer.layers." + std::to_string(i);
    SamTwoWayLayerWeights layer;
    layer.self_attn = bind.attention(l + ".self_attn");
    layer.cross_token_to_image = bind.attention(l + ".cross_attn_token_to_image");
    layer.cross_image_to_token = bind.attention(l + ".cross_attn_image_to_token");
    layer.norm1 = bind.norm(l + ".layer_norm1");
    layer.norm2 = bind.norm(l + ".layer_norm2");
    layer.norm3 = bind.norm(l + ".layer_norm3");
    layer.norm4 = bind.norm(l + ".layer_norm4");
    layer.mlp1 = bind.linear(l + ".mlp.lin1");
    layer.mlp2 = bind.linear(l + ".mlp.lin2");
    d.layers.push_back(layer);
  }
  d.final_attn = bind.attention("mask_decoder.transformer.final_attn_token_to_image");
  d.final_norm = bind.norm("mask_decoder.transformer.layer_norm_final_attn");
  d.upscale1_weight = bind.conv_transpose_channels_last("mask_decoder.upscale_conv1.weight");
  d.upscale1_bias = bind.get("mask_decoder.upscale_conv1.bias");
  d.upscale_norm = bind.norm("mask_decoder.upscale_layer_norm");
  d.upscale2_weight = bind.conv_transpose_channels_last("mask_decoder.upscale_conv2.weight");
  d.upscale2_bias = bind.get("mask_decoder.upscale_conv2.bias");
  for (int64_t i = 0; i < mask_tokens; ++i) {
    d.hypernetworks.push_back(
        bind_feed_forward(bind, "mask_decoder.output_hypernetworks_mlps." + std::to_string(i), 3));
  }
  d.iou_head = bind_feed_forward(bind, "mask_decoder.iou_prediction_head", c.iou_head_depth);
  return d;
}

// Both names of the tied positional embedding may be stored; they must then agree.
Status check_tied_positional_embedding(const WeightStore& store) {
  const TensorInfo* shared = store.find(kSharedPe);
  const TensorInfo* prompt = store.find(kPromptPe);
  if (shared == nullptr || prompt == nullptr) return ok_status();
  if (shared->dtype != prompt->dtype || shared->nbytes != prompt->nbytes ||
      std::memcmp(shared->data, prompt->data, shared->nbytes) != 0) {
    return invalid_argument(std::string("checkpoint holds both ") + kSharedPe + " and " + kPromptPe +
                            " (tied in HF) with different values");
  }
  return ok_status();
}

// Workspace of decode(): channels-last image, dense prompt, tokens, all masks and scores, then the parts'.
size_t decode_workspace_bytes(const SamConfig& c, int64_t tokens) {
  const int64_t grid = c.prompt.image_embedding_size(), hidden = c.decoder.hidden_size;
  return 2 * sam_padded_bytes(grid * grid * hidden) + sam_padded_bytes(tokens * hidden) +
         sam_padded_bytes(c.decoder.num_mask_tokens() * 16 * grid * grid) +
         sam_padded_bytes(c.decoder.num_mask_tokens()) + sam_dense_workspace_bytes(c) +
         sam_decoder_workspace_bytes(c, tokens);
}

}  // namespace

SamModel::~SamModel() = default;

StatusOr<std::unique_ptr<SamModel>> SamModel::load(const std::string& dir, int threads) {
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(nlohmann::json json, read_json_file(config_path));
  auto model = std::unique_ptr<SamModel>(new SamModel());
  ASSIGN_OR_RETURN(model->config_, parse_sam_config(json, config_path));
  ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(dir));
  std::vector<WeightSpec> specs = sam_weight_specs(model->config_);
  if (store->find(kSharedPe) == nullptr && store->find(kPromptPe) == nullptr) {
    for (WeightSpec& spec : specs) spec.optional = spec.optional && spec.name != kSharedPe;  // report it missing
  }
  RETURN_IF_ERROR(check_weights(*store, specs).with_context(dir));
  RETURN_IF_ERROR(check_tied_positional_embedding(*store).with_context(dir));
  ASSIGN_OR_RETURN(model->weights_, F32Weights::load(*store, specs));
  const Binder bind(*model->weights_);
  model->bound_ = std::make_unique<SamWeights>();
  model->bound_->vision = bind_vision(model->config_.vision, bind);
  model->bound_->prompt = bind_prompt(model->config_, bind);
  model->bound_->decoder = bind_decoder(model->config_.decoder, bind);
  if (threads > 0) kernels::set_cpu_threads(threads);
  model->vision_arena_.reserve(sam_vision_workspace_bytes(model->config_.vision));
  model->decoder_arena_.reserve(
      decode_workspace_bytes(model->config_, 1 + model->config_.decoder.num_mask_tokens() + kTypicalSparseTokens));
  return model;  // `store` (the mappings) is released here: the f32 copies are all we need
}

int64_t SamModel::embedding_floats() const {
  return config_.vision.output_channels * config_.vision.grid() * config_.vision.grid();
}

int64_t SamModel::memory_bytes() const {
  const int64_t tokens = 1 + config_.decoder.num_mask_tokens() + kTypicalSparseTokens;
  return static_cast<int64_t>(weights_->bytes() +
                              std::max(vision_arena_.capacity(), sam_vision_workspace_bytes(config_.vision)) +
                              std::max(decoder_arena_.capacity(), decode_workspace_bytes(config_, tokens)));
}

Status SamModel::encode_images(const float* pixels, int64_t n, float* embeddings, const TraceFn& trace) {
  if (n < 0) return invalid_argument("encode_images: negative image count " + std::to_string(n));
  if (n == 0) return ok_status();
  MMSERVE_CHECK(pixels != nullptr && embeddings != nullptr, "encode_images: null buffer");
  const SamVisionConfig& v = config_.vision;
  const size_t bytes = sam_vision_workspace_bytes(v);  // depends on the thread count, which may have changed
  if (vision_arena_.capacity() < bytes) vision_arena_.reserve(bytes);
  const int64_t image_floats = v.num_channels * v.image_size * v.image_size;
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(sam_vision_forward(v, bound_->vision, pixels + i * image_floats,
                                       embeddings + i * embedding_floats(), vision_arena_, trace));
  }
  return ok_status();
}

StatusOr<SamMasks> SamModel::decode(const float* embedding, const SamPrompt& prompt, bool multimask_output,
                                    const TraceFn& trace) {
  MMSERVE_CHECK(embedding != nullptr, "decode: null embedding");
  RETURN_IF_ERROR(sam_check_prompt(config_, prompt));
  const SamMaskDecoderConfig& d = config_.decoder;
  const int64_t hidden = d.hidden_size, grid = config_.prompt.image_embedding_size(), pixels = grid * grid;
  const int64_t mask_tokens = d.num_mask_tokens(), side = 4 * grid;

  // Tokens: [iou_token; mask_tokens] then the sparse prompt (none at all: HF's sparse embeddings are None).
  std::vector<float> token_floats(bound_->decoder.output_tokens.data_as<float>(),
                                  bound_->decoder.output_tokens.data_as<float>() + (1 + mask_tokens) * hidden);
  sam_sparse_embeddings(config_.prompt, bound_->prompt, prompt, token_floats);
  const int64_t tokens = static_cast<int64_t>(token_floats.size()) / hidden;

  const size_t bytes = decode_workspace_bytes(config_, tokens);
  if (decoder_arena_.capacity() < bytes) decoder_arena_.reserve(bytes);
  decoder_arena_.reset();
  ASSIGN_OR_RETURN(Tensor image, decoder_arena_.allocate_tensor(DType::kF32, {pixels, hidden}));
  ASSIGN_OR_RETURN(Tensor dense, decoder_arena_.allocate_tensor(DType::kF32, {pixels, hidden}));
  ASSIGN_OR_RETURN(Tensor token_rows, decoder_arena_.allocate_tensor(DType::kF32, {tokens, hidden}));
  ASSIGN_OR_RETURN(Tensor masks, decoder_arena_.allocate_tensor(DType::kF32, {mask_tokens, side * side}));
  ASSIGN_OR_RETURN(Tensor iou, decoder_arena_.allocate_tensor(DType::kF32, {mask_tokens}));
  std::memcpy(token_rows.data(), token_floats.data(), token_rows.nbytes());
  for (int64_t p = 0; p < pixels; ++p) {  // [hidden, grid, grid] -> channels-last rows
    for (int64_t ch = 0; ch < hidden; ++ch) image.data_as<float>()[p * hidden + ch] = embedding[ch * pixels + p];
  }
  RETURN_IF_ERROR(sam_dense_embedding(config_, bound_->prompt, prompt, dense, decoder_arena_));
  if (trace) trace("prompt.sparse", token_rows);
  if (trace) trace("prompt.dense", dense);
  kernels::add(image, dense, image);  // HF: image_embeddings + dense_prompt_embeddings
  RETURN_IF_ERROR(sam_mask_decoder_forward(config_, *bound_, image, token_rows, masks.data_as<float>(),
                                           iou.data_as<float>(), decoder_arena_, trace));

  // HF: masks[:, :, 1:] and iou_pred[:, :, 1:] when multimask_output, else [0:1] of both.
  const int64_t first = multimask_output ? 1 : 0, count = multimask_output ? mask_tokens - 1 : 1;
  SamMasks out;
  out.count = count;
  out.height = out.width = side;
  const float* m = masks.data_as<float>() + first * side * side;
  out.low_res_logits.assign(m, m + count * side * side);
  out.iou_scores.assign(iou.data_as<float>() + first, iou.data_as<float>() + first + count);
  return out;
}

}  // namespace mmserve::models
