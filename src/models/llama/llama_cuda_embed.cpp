// LlamaCudaModel's token embeddings in host memory (LlamaCudaOptions::embeddings_on_host, llama_cuda.h).
//
// Why: the table is vocab x hidden 16-bit values (Llama-3-8B: 128256 x 4096 = 1.05 GB) of which a decode step reads a
// few rows; with 4-bit weights it is a fifth of the GPU's weight bytes. llama.cpp keeps token_embd on the CPU for
// the same reason. How: the table stays in ordinary host memory in the compute dtype (converted at load as the
// device table would be); stage() gathers the step's rows (padding rows read token 0) into a pinned buffer after
// its synchronisation, so the buffer is free, and copies them to embed_rows_ on the step's stream; launch() then
// runs the same device gather as with a device table, over embed_rows_ with identity ids. The gather sits inside
// the decode graphs with fixed addresses (embed_rows_, embed_ids_), like the step arrays it is staged beside, so
// graph replay needs nothing new. The values are the device table's bit for bit (same conversion, same gather
// kernel): tests/gpu/llama_cuda_test.cpp compares logits with and without the option exactly.
// Cost per step: rows x hidden x 2 bytes of host memcpy and of PCIe (decode at batch 32: 256 KB; a 2048-token
// prefill: 16 MB, ~1% of its time). Untied models only: a tied lm_head needs the table on the GPU anyway, so
// plan_weights() leaves the option off for them.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "models/llama/llama_cuda.h"
#include "models/llama/llama_cuda_kernels.h"

namespace mmserve::models {

Status LlamaCudaModel::upload_host_embeddings(const WeightStore& store) {
  const std::string name = names_.model + "embed_tokens.weight";
  const TensorInfo* t = store.find(name);
  if (t == nullptr) return invalid_argument("the checkpoint has no " + name);
  const DType d = options_.dtype;
  const int64_t n = t->numel();
  if (n != config_.vocab_size * config_.hidden_size) return invalid_argument(name + ": not [vocab, hidden]");
  host_embed_.resize(storage_bytes(d, n));
  if (t->dtype == d) {
    std::memcpy(host_embed_.data(), t->data, host_embed_.size());
    return ok_status();
  }
  // Row blocks through f32, converted as upload() converts the device weights.
  const int64_t h = config_.hidden_size, block = 1024;
  std::vector<float> f32(static_cast<size_t>(block * h));
  for (int64_t r0 = 0; r0 < config_.vocab_size; r0 += block) {
    const int64_t rows = std::min(block, config_.vocab_size - r0);
    const uint8_t* src = static_cast<const uint8_t*>(t->data) + storage_bytes(t->dtype, r0 * h);
    if (!convert_to_f32(t->dtype, src, f32.data(), rows * h)) {
      return unimplemented(name + ": stored as " + dtype_name(t->dtype) + " (f32, f16 or bf16 are read)");
    }
    uint8_t* dst = host_embed_.data() + storage_bytes(d, r0 * h);
    if (d == DType::kF32) {
      std::memcpy(dst, f32.data(), storage_bytes(d, rows * h));
      continue;
    }
    auto* half = reinterpret_cast<uint16_t*>(dst);
    for (int64_t k = 0; k < rows * h; ++k) half[k] = d == DType::kBF16 ? f32_to_bf16(f32[k]) : f32_to_f16(f32[k]);
  }
  return ok_status();
}

void LlamaCudaModel::randomise_host_embeddings(uint64_t seed) {
  // The device weights' distribution (fill_weights: uniform of std 0.02), from a host generator.
  const DType d = options_.dtype;
  const int64_t n = config_.vocab_size * config_.hidden_size;
  host_embed_.resize(storage_bytes(d, n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    const float v = 0.02f * 1.7320508f * (2.0f * u - 1.0f);
    if (d == DType::kF32) {
      std::memcpy(host_embed_.data() + 4 * i, &v, 4);
    } else {
      reinterpret_cast<uint16_t*>(host_embed_.data())[i] = d == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
    }
  }
}

Status LlamaCudaModel::allocate_host_embedding_buffers(int64_t rows) {
  const DType d = options_.dtype;
  ASSIGN_OR_RETURN(embed_rows_, buffers_.allocate(storage_bytes(d, rows * config_.hidden_size)));
  ASSIGN_OR_RETURN(embed_ids_, buffers_.allocate_array<int32_t>(rows));
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  std::iota(ids.begin(), ids.end(), 0);
  CUDA_RETURN_IF_ERROR(cudaMemcpy(embed_ids_, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  return embed_staging_.init(storage_bytes(d, rows * config_.hidden_size));
}

Status LlamaCudaModel::stage_embeddings(const int32_t* tokens, int64_t count) {
  const size_t row = storage_bytes(options_.dtype, config_.hidden_size);
  auto* dst = embed_staging_.data_as<uint8_t>();
  for (int64_t i = 0; i < count; ++i) {  // ids were checked against the vocabulary by run()
    std::memcpy(dst + static_cast<size_t>(i) * row, host_embed_.data() + static_cast<size_t>(tokens[i]) * row, row);
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(embed_rows_, dst, row * static_cast<size_t>(count), cudaMemcpyHostToDevice,
                                       stream_.get()));
  return ok_status();
}

Status LlamaCudaModel::gather_embeddings(int64_t tokens, cudaStream_t s) {
  const int64_t h = config_.hidden_size;
  if (!host_embeddings_) {
    return gather_rows_f32(embed_, options_.dtype, config_.vocab_size, h, arrays_.tokens, tokens, h, x_, s);
  }
  return gather_rows_f32(embed_rows_, options_.dtype, tokens, h, embed_ids_, tokens, h, x_, s);
}

}  // namespace mmserve::models
