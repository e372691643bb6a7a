// The family interface: what every model family (CLIP, Whisper, SAM, and the decoders to come) gives the serving
// layer, so that serving/ has one executor vector, one engine loop and no family branches.
//
// A family brings three things, all in engine/ (below serving and cli, so both use the same code):
//   - an InputPreparer (one per loaded model, thread-safe, runs on the preprocessing pool): a request's inputs as
//     the API decoded them (texts, encoded images, audio bytes, named tensors, the family's RequestParams) ->
//     the family's ModelInput plus what the scheduler needs (items per batching slot, the SPEC 3.2 QoS score).
//     `mmserve embed/transcribe/segment` call the same preparer as the server, so their outputs agree.
//   - an Executor (one per instance, on its device, driven by ONE engine thread, no locks): warm(), run(batch)
//     of prepared inputs -> one ModelOutput per item, a memory report, its metadata (FamilyInfo).
//   - a ModelOutput per request, which the family's API codec (api/) reads with output_as<T>().
// Families are found by their models::Family in engine/families.h (one registry line each).
//
// Scheduling contract. An Executor is one-shot (a batch of independent items in, outputs out: CLIP's towers,
// SAM, Whisper's transcriptions, whose decoder rows are admitted inside the executor). run() must finish every
// item exactly once through BatchHooks::finish, as soon as that item's outputs are ready (early finishes keep a
// text-only request from waiting behind images), and should return to the loop through
// BatchHooks::between_chunks at least every `chunk_budget_ms` of device time when the hooks set one, so that an
// urgent request waits at most about one chunk (issue 13 item 7). The decoders of issue 14 will add an
// iterative interface (admit / step / preempt under a KV-cache byte budget, streaming per token); the engine
// loop's chunk hook is where their steps meet the same priority rule.
//
// Inputs are not consumed by run() while `keep_inputs` is set: a batch that fails with a device fault
// (kInternal) is retried once on another replica with the same inputs.
// Tests: tests/unit/engine/executor_test.cpp (the families table), and every family's executor tests.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mmserve::engine {

// ---------------------------------------------------------------------------------------------------------------
// Request inputs, as the API layer hands them over.

enum class InputKind { kText, kImageBytes, kPixelValues, kAudioBytes, kTensor };

struct InputItem {
  InputKind kind = InputKind::kText;
  std::string text;                 // kText: UTF-8
  std::string image_bytes;          // kImageBytes: an encoded JPEG/PNG/WebP file
  std::vector<float> pixel_values;  // kPixelValues: [3, H, W], already preprocessed
  std::string audio_bytes;          // kAudioBytes: an encoded WAV/FLAC/Ogg/MP3 file
  // kTensor: a named numeric input (e.g. SAM's point_coords [N, 2]); integers are carried as exact floats.
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  bool is_image() const { return kind == InputKind::kImageBytes || kind == InputKind::kPixelValues; }
};

// A family's per-request options (Whisper's task and language, SAM's multimask flag...): each family derives its
// own, VIRTUALLY (so an API codec can hand one object that carries several families' options, e.g. KServe's
// parameters), and its preparer reads it with dynamic_cast; nullptr = the defaults.
struct RequestParams {
  virtual ~RequestParams() = default;
};

// ---------------------------------------------------------------------------------------------------------------
// Prepared inputs and outputs.

// Batching slots: a request uses up to this many separately budgeted kinds of items (CLIP: texts, images).
inline constexpr int kBatchSlots = 2;

struct ModelInput {
  virtual ~ModelInput() = default;
};

struct ModelOutput {
  virtual ~ModelOutput() = default;
  int64_t batch_size = 0;  // the largest engine batch (of one slot) the request's items ran in
  // Seconds of audio this output covers (speech families; the mmserve_audio_seconds_total counter).
  virtual double audio_seconds() const { return 0.0; }
  // Generating families (the mmserve_generation_tokens_total counter and the TTFT / TPOT histograms): the tokens
  // generated, and the milliseconds from the request joining the engine batch (its queue time ends there) to the
  // first one and to the last (< 0: none).
  virtual int64_t generated_tokens() const { return 0; }
  virtual double first_token_ms() const { return -1.0; }
  virtual double last_token_ms() const { return -1.0; }
  // LoRA (issue 16): the adapters this output ran under (the one the request named, or the gate's choice, each
  // counted with all of generated_tokens()): mmserve_adapter_requests_total / _generation_tokens_total.
  virtual std::vector<std::string> adapters() const { return {}; }
};

template <typename T>
const T* output_as(const std::shared_ptr<const ModelOutput>& output) {
  return dynamic_cast<const T*>(output.get());
}

// What an InputPreparer makes of one request.
struct Prepared {
  std::unique_ptr<ModelInput> input;
  std::array<int64_t, kBatchSlots> items{};  // batch budget used per slot
  double score = 0.0;                        // SPEC 3.2 QoS score (higher first)
  int64_t tokens = 0;                        // text tokens (OpenAI `usage`)
  bool retriable = true;                     // false: it already streamed output, never run it twice
};

// SPEC 3.2's QoS score: S = 0.4 min(img_tokens / 4096, 1) + 0.35 min(audio_s / 60, 1) + 0.25 min(text_len / 512, 1),
// every term clamped to [0, 1] (the document's text says all three lie in [0, 1]; its Go code clamps only the
// audio term). text_len in Unicode code points. Weights and maxima are configurable (engine/qos.cpp).
struct QosWeights {
  double image = 0.4, audio = 0.35, text = 0.25;
  double image_tokens_max = 4096, audio_seconds_max = 60, text_chars_max = 512;
};
double qos_score(double image_tokens, double audio_seconds, double text_chars, const QosWeights& w = {});
// Unicode code points in valid UTF-8 (bytes that are not continuation bytes): the score's text length.
int64_t count_code_points(const std::string& utf8);

// The most images one generation request may carry (LLaVA; more are a 400 before any is decoded).
inline constexpr int64_t kMaxImagesPerRequest = 16;

struct PreparerOptions {
  std::string model;                              // named in errors
  int64_t max_image_pixels = 64LL * 1024 * 1024;  // decoded images above this are kTooLarge
  double audio_seconds_max = 7200;                // speech families: longer audio is kTooLarge
  int64_t audio_bytes_max = 256LL << 20;          // speech families: larger files are kTooLarge before decoding
  QosWeights qos;
};

class InputPreparer {
 public:
  virtual ~InputPreparer() = default;
  // Errors name the input by index: kInvalidArgument for what the client sent wrong, kTooLarge above limits.
  // `inputs` are consumed (large buffers moved out).
  virtual StatusOr<Prepared> prepare(std::vector<InputItem>& inputs, const RequestParams* params) const = 0;
  // True when prepare() would decode media (it then runs on the preprocessing pool); texts, tensors and pixel
  // values cost microseconds and are prepared on the submitting thread, so they never queue behind decodes.
  virtual bool decodes_media(const std::vector<InputItem>& inputs) const;
};

// ---------------------------------------------------------------------------------------------------------------
// The executor.

struct TensorSpec {
  std::string name;
  std::string datatype;        // KServe: "BYTES", "FP32", "INT32"
  std::vector<int64_t> shape;  // -1 for variable
};

// What a family tells the server and its metadata routes.
struct FamilyInfo {
  std::string platform;                             // KServe platform: "mmserve_clip"
  std::array<std::string, kBatchSlots> slot_names;  // mmserve_batch_size{tower=...}; "" = unused slot
  std::vector<TensorSpec> inputs, outputs;          // KServe metadata
  int64_t embedding_dim = 0, image_size = 0, max_text_tokens = 0;
  bool counts_audio = false;  // a speech family: mmserve_audio_seconds_total counts its outputs' audio_seconds()
  bool generates = false;     // a text-generating family: the generation metrics read its outputs (see ModelOutput)
  bool takes_adapters = false;  // loads LoRA adapters (Executor::load_adapter; issue 16)
};

// A cache an executor keeps (SAM's image embeddings): exported as mmserve_cache_* metrics.
struct CacheStats {
  std::string name;
  int64_t hits = 0, misses = 0, entries = 0, bytes = 0, capacity_bytes = 0;
};

// A mixture-of-experts decoder's routing so far (issue 15: expert load per layer): tokens[l * experts + e] is how
// many (token, expert) decisions of layer l chose expert e, every token the engine ran counted once per layer.
struct ExpertLoadStats {
  int64_t layers = 0, experts = 0;
  std::vector<int64_t> tokens;
};

// A generating family's sequences (vLLM's gauges): mmserve_num_requests_running / _waiting, mmserve_num_preemptions_total,
// mmserve_kv_cache_usage_ratio. Read from other threads (the metrics scrape): executors keep them in atomics.
struct SequenceStats {
  int64_t running = 0, waiting = 0, preemptions = 0;
  double kv_cache_usage = 0;  // blocks held by sequences / the pool's blocks
};

// The online distillation of a gate head (issue 16 item 5, models/lora/gate_distill.h): mmserve_gate_distill_*.
// Losses are KL(target || router) in nats, averaged over the samples; < 0 before the first training round.
struct RouterStats {
  double loss = -1, heldout_loss = -1;  // the last round's training loss; the held-apart loss of the head in use
  int64_t updates = 0, rollbacks = 0;   // rounds kept, and rounds undone because the held-apart loss rose
  int64_t samples = 0;                  // requests observed
};

// A LoRA adapter an executor holds (issue 16): GET /v2/adapters and /v1/models list these.
struct AdapterInfo {
  std::string name, dir;
  std::string modality = "text";
  int64_t rank = 0;                  // the largest of its modules
  std::vector<std::string> targets;  // the adapted linears ("q_proj", ...)
  int64_t bytes = 0;                 // host memory of its matrices
  bool hot_swappable = true;
  int64_t requests = 0;              // requests that ran under it since it was loaded (named or routed to it)
};

struct BatchItem {
  const ModelInput* input = nullptr;
  ModelInput* mutable_input = nullptr;  // the same, for executors that release buffers when !keep_inputs
  std::function<bool()> cancelled;      // may be empty; polled where the executor can stop early
};

struct BatchHooks {
  // Item `index` is done (output or error); `compute_ms` is the time its own work took. Exactly once per item.
  std::function<void(size_t index, StatusOr<std::shared_ptr<const ModelOutput>> output, double compute_ms)> finish;
  // A preemption point: the loop may run urgent work here; called only when set.
  std::function<void()> between_chunks;
  // Run at most about this long between preemption points (<= 0: no bound, run the batch whole).
  double chunk_budget_ms = 0;
  // The batch may be retried elsewhere: leave the inputs intact.
  bool keep_inputs = false;
  // Continuous batching (generating families): up to `max_items` requests queued meanwhile, handed to the running
  // batch; they take the next indices (the batch's size, then on) for finish(). Set only for such families; may
  // return none.
  std::function<std::vector<BatchItem>(int64_t max_items)> admit;
  // Long-running batches (generating families) call this between steps, at most about every 50 ms, so the runtime
  // publishes caches() and sequences() while the batch goes on. May be empty.
  std::function<void()> progress;
};

// What a batch ran, for the batch-size histograms.
struct BatchStats {
  std::array<int64_t, kBatchSlots> slot_items{};  // items per slot actually run
  double compute_ms = 0;                          // device time of the batch (preemptions excluded)
  // Set when the device (or its driver) broke during the batch (kInternal: every CUDA error maps to it): the
  // replica leaves the rotation and the items that failed with kInternal are retried once on another replica.
  std::optional<Status> device_fault;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual Device device() const = 0;
  virtual DType dtype() const = 0;
  // Device memory (cuda) or host memory (cpu) held: weights + planned activations (+ graphs, caches).
  virtual int64_t memory_bytes() const = 0;
  virtual std::string describe() const = 0;  // one line for the load log
  virtual const FamilyInfo& info() const = 0;
  // One small run touching every weight and buffer (and capturing graphs); errors fail the model's load.
  virtual Status warm() = 0;
  virtual BatchStats run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) = 0;
  virtual std::vector<CacheStats> caches() const { return {}; }
  virtual std::optional<SequenceStats> sequences() const { return std::nullopt; }
  virtual std::optional<ExpertLoadStats> expert_load() const { return std::nullopt; }
  // A decoder distilling its gate head online (thread-safe: read by the metrics publication).
  virtual std::optional<RouterStats> router() const { return std::nullopt; }
  // LoRA adapters (issue 16), callable from any thread while batches run; requests name an adapter in their
  // family's params. Families without adapters answer kUnimplemented.
  virtual Status load_adapter(const std::string& name, const std::string& dir) {
    return Status(StatusCode::kUnimplemented, "this model family takes no LoRA adapters (adapter '" + name + "')");
  }
  // unload: the name is gone at once (later requests naming it get kNotFound). Sequences under the adapter, running
  // or waiting, finish with it, or with `fail_running` end at their next step with kNotFound saying it was unloaded.
  virtual Status unload_adapter(const std::string& name, bool /*fail_running*/ = false) {
    return Status(StatusCode::kNotFound, "no adapter '" + name + "' is loaded");
  }
  virtual std::vector<AdapterInfo> adapter_list() const { return {}; }
  // Whether every instance holds its own copy of an adapter (CLIP's merged towers, on each instance's device): the
  // runtime then loads and unloads it on every instance. false: the first instance's registry serves all replicas
  // (the decoders keep one host copy that each replica's GPU slots read).
  virtual bool adapters_per_instance() const { return false; }
};

// Options every family's executor takes. Family-specific ones come as each family's own struct (ClipOptions,
// WhisperOptions, SamOptions) or, through the server, as the JSON of the model's mmserve.yaml family keys.
struct ExecutorOptions {
  Device device = Device::cpu();
  int threads = 0;              // CPU threads for kernels; 0 = library default (all cores)
  int64_t batch_size_max = 64;  // larger batches are run in chunks of this size
  // Compute dtype: nullopt = the device's default (f32 on cpu, bf16 on cuda). The CPU path takes f32 only.
  std::optional<DType> dtype;
  // CUDA: the batch sizes that get a graph (those above batch_size_max are dropped; batch_size_max itself is
  // always one). Empty = 1, 2, 4, ... up to batch_size_max.
  std::vector<int64_t> batch_buckets;
  bool cuda_graphs = true;  // CUDA: false runs the kernels eagerly (debugging, compute-sanitizer)
  // CUDA: tensor parallel over these GPUs (NCCL; `device` is then the first). Empty: one GPU.
  std::vector<int> tp_devices;
  // CUDA: pipeline stages, stage s on pipeline_devices[s] (CLIP); families without a pipeline refuse it.
  std::vector<int> pipeline_devices;
  // "nccl", or "staged": sums through host memory, ranks may share a GPU (checks on one GPU; core/cuda/collective.h).
  std::string tp_collective = "nccl";
};

}  // namespace mmserve::engine
