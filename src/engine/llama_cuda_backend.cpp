// LlamaCudaBackend (see llama_cuda_backend.h): LlamaCudaModel plus sampling on the GPU (kernels/sampling), which
// copies back only the ids and the logprobs asked for.
#include "engine/llama_cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <cuda_runtime.h>  // cudaMalloc for typed pointers

#include "core/cuda/cuda_status.h"
#include "core/cuda/device_memory.h"
#include "engine/llama_executor.h"
#include "kernels/sampling/sampling_cuda.h"
#include "core/safetensors.h"
#include "models/llama/llama_cuda.h"
#include "models/llava/llava_cuda.h"

namespace mmserve::engine {
namespace {

class LlamaCudaBackend final : public DecoderBackend {
 public:
  explicit LlamaCudaBackend(std::unique_ptr<models::LlamaCudaModel> model) : model_(std::move(model)) {}
  ~LlamaCudaBackend() override {
    for (void* p : std::initializer_list<void*>{d_params_, d_ids_, d_logprobs_, d_top_ids_, d_top_logprobs_,
                                                d_seen_offsets_, d_seen_ids_, d_prompt_lens_, d_scratch_}) {
      if (p != nullptr) cudaFree(p);
    }
  }

  Status init() {
    const int64_t rows = max_rows();
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_params_, rows * sizeof(kernels::SamplingRowParams)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_ids_, rows * sizeof(int32_t)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_logprobs_, rows * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_top_ids_, rows * kernels::kSamplingTopNMax * sizeof(int32_t)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_top_logprobs_, rows * kernels::kSamplingTopNMax * sizeof(float)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_seen_offsets_, (rows + 1) * sizeof(int32_t)));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&d_prompt_lens_, rows * sizeof(int32_t)));
    // Host side: params, then the outputs, then the seen ids (grown on demand).
    return host_.init(rows * (sizeof(kernels::SamplingRowParams) + 2 * sizeof(int32_t) + sizeof(float) +
                              kernels::kSamplingTopNMax * (sizeof(int32_t) + sizeof(float)) + 8) + 64);
  }

  std::string describe() const override {
    return std::string("cuda:") + std::to_string(device_) + " " + dtype_name(model_->dtype()) +
           (model_->graphs() ? ", decode CUDA graphs" : ", no CUDA graphs");
  }
  int64_t num_blocks() const override { return model_->num_blocks(); }
  int64_t block_size() const override { return model_->block_size(); }
  int64_t pool_bytes() const override { return model_->pool_bytes(); }
  int64_t memory_bytes() const override { return model_->memory_bytes(); }
  Status forward(const models::DecoderStep& step) override {
    rows_ = static_cast<int64_t>(step.logit_rows.size());
    RETURN_IF_ERROR(model_->forward(step));
    // Mixtral: the step's routing to the host (one copy per step).
    if (model_->config().num_experts > 0) return model_->copy_routing(routing_);
    return ok_status();
  }
  const models::MoeRoutingTrace* routing() const override {
    return model_->config().num_experts > 0 ? &routing_ : nullptr;
  }
  models::LoraImagePacker adapter_packer() const override {
    return [config = model_->config(), dtype = model_->dtype(), rank = max_lora_rank_](
               const models::LoraAdapter& adapter, const models::LoraFileModules& stored) {
      return models::LlamaCudaModel::pack_lora_slot_image_from_file(adapter, stored, config, dtype, rank);
    };
  }
  StatusOr<bool> adapter_ready(const models::LoraAdapter& adapter) override { return model_->lora_ready(adapter); }
  Status wait_for_adapters() override { return model_->lora_wait_copies(); }
  StatusOr<std::vector<float>> mean_input_embedding(const std::vector<int32_t>& tokens,
                                                    const std::vector<int32_t>& embed_rows,
                                                    const float* embeds) override {
    return model_->mean_input_embedding(tokens, embed_rows, embeds);
  }
  StatusOr<std::vector<float>> gate_first_layer(const std::vector<int32_t>& tokens,
                                                const std::shared_ptr<const models::GateHead>& gate,
                                                std::vector<float>* e) override {
    return model_->gate_first_layer(tokens, gate, e);
  }

  Status sample(std::span<const SampleRow> rows, std::vector<SampledToken>& out) override {
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n != rows_) return internal_error("sample() rows differ from the step's");
    const int64_t vocab = model_->config().vocab_size;
    cudaStream_t s = model_->stream();
    float* logits = const_cast<float*>(model_->logits());
    const SamplingInputs in = sampling_inputs(rows);
    auto* params = host_.data_as<kernels::SamplingRowParams>();  // then the outputs come back after them
    std::copy(in.params.begin(), in.params.end(), params);
    const bool penalties = in.penalties, logprobs = in.logprobs;
    const int64_t top_n = in.top_n;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_params_, params, n * sizeof(kernels::SamplingRowParams),
                                         cudaMemcpyHostToDevice, s));
    // EOS before min_tokens: those logits to -inf (the raw logprobs then see the ban too, as vLLM's do).
    static const float kMinusInf = -std::numeric_limits<float>::infinity();
    for (int64_t r = 0; r < n; ++r) {
      for (int32_t id : rows[r].banned) {
        if (id >= 0 && id < vocab) {
          CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits + r * vocab + id, &kMinusInf, sizeof(float),
                                               cudaMemcpyHostToDevice, s));
        }
      }
    }
    kernels::SamplingArgs a;
    a.logits = logits, a.rows = n, a.vocab = vocab, a.vocab_ld = vocab, a.params = d_params_;
    a.ids = d_ids_;
    if (logprobs) {
      a.logprobs = d_logprobs_;
      a.top_n = top_n;
      if (top_n > 0) a.top_ids = d_top_ids_, a.top_logprobs = d_top_logprobs_;
    }
    if (penalties) RETURN_IF_ERROR(stage_seen(in, a));
    RETURN_IF_ERROR(kernels::sample_tokens_cuda(a, s));
    // Back: ids, and the logprobs when asked.
    uint8_t* back = host_.data_as<uint8_t>() + n * sizeof(kernels::SamplingRowParams);
    int32_t* ids = reinterpret_cast<int32_t*>(back);
    float* lp = reinterpret_cast<float*>(ids + n);
    int32_t* top_ids = reinterpret_cast<int32_t*>(lp + n);
    float* top_lp = reinterpret_cast<float*>(top_ids + n * top_n);
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids, d_ids_, n * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
    if (logprobs) {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lp, d_logprobs_, n * sizeof(float), cudaMemcpyDeviceToHost, s));
      if (top_n > 0) {
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(top_ids, d_top_ids_, n * top_n * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(top_lp, d_top_logprobs_, n * top_n * sizeof(float), cudaMemcpyDeviceToHost, s));
      }
    }
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    out.assign(static_cast<size_t>(n), SampledToken());
    for (int64_t r = 0; r < n; ++r) {
      out[r].id = ids[r];
      if (rows[r].logprobs < 0) continue;
      TokenLogprob t;
      t.id = ids[r];
      t.logprob = lp[r];
      for (int64_t i = 0; i < rows[r].logprobs; ++i) t.top.emplace_back(top_ids[r * top_n + i], top_lp[r * top_n + i]);
      out[r].logprob = std::move(t);
    }
    return ok_status();
  }

  int device_ = 0;

 private:
  int64_t max_rows() const { return max_seqs_; }

  // The tokens each row has seen (prompt, then generated) as CSR on the device, and the zeroed scratch the
  // penalty kernel needs ([rows, vocab] words, allocated at the first penalised step).
  Status stage_seen(const SamplingInputs& in, kernels::SamplingArgs& a) {
    cudaStream_t s = model_->stream();
    const int64_t n = static_cast<int64_t>(in.prompt_lens.size()), vocab = model_->config().vocab_size;
    const std::vector<int32_t>& seen_offsets = in.seen_offsets;
    const std::vector<int32_t>& seen_ids = in.seen_ids;
    const std::vector<int32_t>& prompt_lens = in.prompt_lens;
    if (seen_ids.size() > seen_capacity_) {
      if (d_seen_ids_ != nullptr) cudaFree(d_seen_ids_);
      seen_capacity_ = std::max<size_t>(seen_ids.size() * 2, 4096);
      CUDA_RETURN_IF_ERROR(cudaMalloc(&d_seen_ids_, seen_capacity_ * sizeof(int32_t)));
    }
    if (d_scratch_ == nullptr) {
      const size_t bytes = static_cast<size_t>(max_seqs_ * vocab) * sizeof(uint64_t);
      CUDA_RETURN_IF_ERROR(cudaMalloc(&d_scratch_, bytes));
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_scratch_, 0, bytes, s));
    }
    // Synchronous copies from pageable vectors (penalised steps are the rare case).
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_seen_offsets_, seen_offsets.data(), (n + 1) * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, s));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_seen_ids_, seen_ids.data(), seen_ids.size() * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, s));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_prompt_lens_, prompt_lens.data(), n * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, s));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    a.seen_offsets = d_seen_offsets_;
    a.seen_ids = d_seen_ids_;
    a.prompt_lens = d_prompt_lens_;
    a.scratch = d_scratch_;
    return ok_status();
  }

 public:
  int64_t max_seqs_ = 256;
  int64_t max_lora_rank_ = 16;  // the slots' (pack_lora_slot_image)

 private:
  std::unique_ptr<models::LlamaCudaModel> model_;
  models::MoeRoutingTrace routing_;
  int64_t rows_ = 0;
  PinnedBuffer host_;
  kernels::SamplingRowParams* d_params_ = nullptr;
  int32_t* d_ids_ = nullptr;
  float* d_logprobs_ = nullptr;
  int32_t* d_top_ids_ = nullptr;
  float* d_top_logprobs_ = nullptr;
  int32_t *d_seen_offsets_ = nullptr, *d_seen_ids_ = nullptr, *d_prompt_lens_ = nullptr;
  uint64_t* d_scratch_ = nullptr;
  size_t seen_capacity_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<DecoderBackend>> make_llama_cuda_backend(const std::string& model_dir,
                                                                  const ExecutorOptions& options,
                                                                  const LlamaOptions& llama,
                                                                  models::LlamaConfig& config, int64_t& max_model_len,
                                                                  DType& dtype, const models::LlavaConfig* llava,
                                                                  CudaImageEncoder* vision) {
  std::string why;
  if (!cuda_device_available(&why)) return Status(StatusCode::kUnavailable, "no CUDA device for " + options.device.to_string() + ": " + why);
  models::LlamaCudaOptions o;
  o.device = options.device.index;
  o.dtype = options.dtype.value_or(DType::kBF16);
  o.block_size = llama.block_size;
  o.kv_cache_bytes = llama.kv_cache_bytes;
  o.kv_cache_dtype = llama.kv_cache_dtype;  // checked by the model (names, FP8 with f32)
  o.embeddings_on_host = llama.embeddings_on_host;
  o.memory_utilization = llama.gpu_memory_utilization;
  o.max_num_tokens = llama.max_num_batched_tokens;
  o.max_num_seqs = std::min(llama.max_num_seqs, options.batch_size_max);
  o.max_model_len = llama.max_model_len;
  o.graphs = options.cuda_graphs;
  // LoRA slots: as many as asked, else 4 when adapters come with the model (a GPU model loaded without slots
  // refuses adapters at load).
  o.max_loras = llama.max_loras > 0 ? llama.max_loras
                                    : (llama.adapters.empty() ? 0 : std::max<int64_t>(4, llama.adapters.size()));
  o.max_lora_rank = llama.max_lora_rank;
  std::unique_ptr<models::LlamaCudaModel> model;
  if (llava != nullptr) {
    // The tower first (it checks the whole checkpoint), then the decoder from the same files.
    models::LlavaCudaVisionOptions vo;
    vo.device = o.device;
    vo.dtype = o.dtype;
    ASSIGN_OR_RETURN(std::unique_ptr<models::LlavaCudaVision> tower, models::LlavaCudaVision::load(model_dir, vo));
    ASSIGN_OR_RETURN(std::unique_ptr<WeightStore> store, WeightStore::open_model_dir(model_dir));
    ASSIGN_OR_RETURN(models::LlavaLayout layout, models::detect_llava_layout(*store, model_dir));
    ASSIGN_OR_RETURN(model, models::LlamaCudaModel::load_decoder(*store, llava->text, layout.text, o));
    std::shared_ptr<models::LlavaCudaVision> shared(std::move(tower));
    vision->encode = [raw = shared.get()](const float* pixels, int64_t n, float* features) {
      return raw->encode(pixels, n, features);
    };
    vision->encode_lora = [raw = shared.get()](const float* pixels, int64_t n, float* features,
                                               const std::shared_ptr<const models::LoraAdapter>& adapter) {
      return raw->encode(pixels, n, features, adapter);
    };
    vision->image_newline = shared->image_newline();
    vision->owner = shared;
  } else {
    ASSIGN_OR_RETURN(model, models::LlamaCudaModel::load(model_dir, o));
  }
  config = model->config();
  max_model_len = model->max_model_len();
  dtype = model->dtype();
  auto backend = std::make_unique<LlamaCudaBackend>(std::move(model));
  backend->device_ = o.device;
  backend->max_seqs_ = o.max_num_seqs;
  backend->max_lora_rank_ = o.max_lora_rank;
  RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<DecoderBackend>(std::move(backend));
}

}  // namespace mmserve::engine
