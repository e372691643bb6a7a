// Whisper (HF `WhisperForConditionalGeneration`): a conv + pre-LN transformer audio encoder over log-mel frames
// and a pre-LN transformer text decoder with causal self-attention (KV cache) and cross-attention over the
// encoder output. Logits come from the token embedding (proj_out is tied to embed_tokens).
//
// The forward code in whisper.cpp follows HF's modeling_whisper.py step by step; intermediates can be traced by
// name. Weights of any stored dtype (f32, f16, bf16) are upcast to f32 at load and the CPU path computes in f32.
// Decoding is split into encode() -> start_decoder() (cross-attention K/V computed once per request) ->
// prefill() -> step()..., all rows of a batch advancing in lockstep. greedy() is HF's raw greedy loop (argmax of
// the raw logits, no logits processor).
// Tests: tests/unit/models/whisper_model_test.cpp (self-consistency on a tiny random checkpoint, broken
// checkpoints, config errors; HF goldens from tools/reference/make_whisper_fixtures.py when generated).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/activation/activation.h"
#include "models/common/encoder_block.h"
#include "models/common/weight_table.h"

namespace mmserve::models {

// HF WhisperConfig defaults (whisper-tiny-like shapes).
struct WhisperConfig {
  int64_t vocab_size = 51865;
  int64_t num_mel_bins = 80;
  int64_t d_model = 384;
  int64_t encoder_layers = 4;
  int64_t encoder_attention_heads = 6;
  int64_t encoder_ffn_dim = 1536;
  int64_t decoder_layers = 4;
  int64_t decoder_attention_heads = 6;
  int64_t decoder_ffn_dim = 1536;
  int64_t max_source_positions = 1500;
  int64_t max_target_positions = 448;
  kernels::Activation activation_function = kernels::Activation::kGelu;
  bool tie_word_embeddings = true;
  float layer_norm_eps = 1e-5f;  // nn.LayerNorm's default: not a config key in HF
  int64_t decoder_start_token_id = 50257;
  int64_t pad_token_id = 50256;
  int64_t eos_token_id = 50256;
};

// Parses a WhisperForConditionalGeneration config.json (HF defaults for absent keys; errors name the key).
// scale_embedding = true is kUnimplemented (no released Whisper checkpoint uses it).
StatusOr<WhisperConfig> parse_whisper_config(const nlohmann::json& json, const std::string& label);
// The weight table (HF names; k_proj has no bias; proj_out.weight optional when tied).
std::vector<WeightSpec> whisper_weight_specs(const WhisperConfig& config);
// Encoder frames out of `mel_frames` input frames: conv2 has kernel 3, stride 2, padding 1.
int64_t whisper_encoder_frames(int64_t mel_frames);

struct WhisperDecoderLayerWeights {
  EncoderBlockWeights self;  // ln1 = self_attn_layer_norm, qkv fused (zero k bias), ln2 = final_layer_norm, MLP
  Tensor cross_ln_weight, cross_ln_bias;  // encoder_attn_layer_norm
  Tensor cross_q_weight, cross_q_bias;
  Tensor cross_k_weight;  // no bias
  Tensor cross_v_weight, cross_v_bias;
  Tensor cross_out_weight, cross_out_bias;
};

// Per-request decoder state: cross-attention K/V from the encoder output (computed once) and the self-attention
// KV cache. Rows of the batch advance together; `length` tokens are cached.
struct WhisperDecoderState {
  int64_t batch = 0;
  int64_t frames = 0;                                // encoder frames the cross-attention sees
  int64_t capacity = 0;                              // cache rows per batch row (<= max_target_positions)
  int64_t length = 0;                                // tokens processed so far
  std::vector<std::vector<float>> self_k, self_v;    // per layer [batch, capacity, d]
  std::vector<std::vector<float>> cross_k, cross_v;  // per layer [batch, frames, d]

  // Reorders the rows: new row i becomes a copy of old row src[i] (self and cross K/V). src may repeat rows (beam
  // search), drop rows (finished requests leave) or be empty; kInvalidArgument for an index outside 0..batch-1.
  // Tested through the CPU decoder rows (tests/unit/models/whisper_decoding_test.cpp).
  Status reorder(const std::vector<int64_t>& src);
};

class WhisperModel {
 public:
  // Loads an HF Whisper directory: config.json + model.safetensors (or sharded with an index).
  static StatusOr<std::unique_ptr<WhisperModel>> load(const std::string& model_dir);

  const WhisperConfig& config() const { return config_; }
  size_t weight_bytes() const { return weights_->bytes(); }

  // mel [batch, num_mel_bins, frames] f32 (frames <= 2 * max_source_positions; 3000 for real audio) ->
  // encoder_out [batch, whisper_encoder_frames(frames), d_model] (resized), HF's encoder last_hidden_state.
  Status encode(const Tensor& mel, std::vector<float>& encoder_out, const TraceFn& trace = nullptr) const;

  // A state for `batch` rows over encoder_out [batch, frames, d_model] (as encode() wrote it), with room for
  // `capacity` tokens per row (<= max_target_positions). Computes every layer's cross-attention K/V.
  StatusOr<WhisperDecoderState> start_decoder(const std::vector<float>& encoder_out, int64_t batch, int64_t frames,
                                              int64_t capacity) const;
  // Runs ids [batch][n] (the same n for every row, n >= 1) through the decoder at positions length..length+n-1
  // (causal), appends them to the cache, and writes the last position's logits [batch, vocab] (resized).
  Status prefill(WhisperDecoderState& state, const std::vector<std::vector<int32_t>>& ids, std::vector<float>& logits,
                 const TraceFn& trace = nullptr) const;
  // One token per row: prefill with n = 1.
  Status step(WhisperDecoderState& state, const std::vector<int32_t>& tokens, std::vector<float>& logits) const;

  // HF's raw greedy decoding of one mel [1, num_mel_bins, frames]: prompt, then argmax (first index on ties) of
  // the raw logits until `eos` or max_new_tokens. Returns the new tokens up to (excluding) eos.
  StatusOr<std::vector<int32_t>> greedy(const Tensor& mel, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                        int64_t eos) const;

  Tensor weight(const std::string& name) const { return weights_->get(name); }

 private:
  WhisperModel() = default;
  void bind_weights();
  Status check_ids(const std::vector<int32_t>& ids) const;

  WhisperConfig config_;
  std::unique_ptr<F32Weights> weights_;
  std::vector<EncoderBlockWeights> encoder_blocks_;
  std::vector<WhisperDecoderLayerWeights> decoder_layers_;
  Tensor lm_head_;  // [vocab, d]: proj_out.weight, or embed_tokens when tied
};

}  // namespace mmserve::models
