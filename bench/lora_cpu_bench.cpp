// Issue 16's figures that need no GPU, at Llama-3-8B's shapes (docs/perf/lora_cpu.md):
//   bm_gate_request   one request's routing: the mean of a 128-token prompt's embed_tokens rows
//                     (LlamaModel::mean_input_embedding) and GateHead::route (D 4096, H 256, N 100): the target is
//                     <= 0.2 ms. bm_gate_mean and bm_gate_route time the two halves; bm_gate_route_linear the
//                     router's two products through kernels::linear (OpenBLAS), for comparison.
//   bm_adapter_load   models::load_lora_adapter of a rank-16 adapter on all seven linears of 32 layers (hidden 4096,
//                     intermediate 14336, 8 kv heads of 128) saved in bf16 (84 MB) or f32 (168 MB), the page cache
//                     warm: the target is <= 10 ms. /bf16_file and /f32_file: a CPU model's load (f32 copies);
//                     bm_adapter_load_gpu a GPU model's (CUDA builds: the slot image packed from the file's bytes into
//                     the model's bf16, no f32 copy; /pooled reuses the last unloaded image's buffer as the server
//                     does, /fresh allocates each time: pinned where cudaHostAlloc works, which its `pinned` counter
//                     and label say, else pageable), against bm_adapter_load_gpu_via_f32 in the same run (the load
//                     before: f32 copies, then the image packed from them into a fresh buffer);
//                     bm_adapter_load_checks the load's open and checks alone (a packer that copies nothing).
//                     bm_adapter_convert/prefaulted is the f32 conversion's floor (the same bf16 -> f32 conversion of
//                     the mapped file, one thread, into buffers allocated once: no open, no header, no page faults)
//                     and /zero_filled the conversion as the loader did it before it appended chunks (fresh
//                     zero-filled vectors, then the conversion).
// Every file the benches read is written by this binary into a scratch directory (random values, fixed seeds): a
// gate head as PyTorch saves nn.Sequential(Linear(D, 256), ReLU(), Linear(256, N)), an embed_tokens table of 8192
// rows (128 MB of f32, four times the dev VM's 32 MB L3, so the prompt's rows come from memory as from Llama-3-8B's
// 2 GB table; it fits in the H200 host's 300 MB L3), and a PEFT adapter directory (bf16 and f32).
//   build/cpu-release/bench/lora_cpu_bench --benchmark_context=commit=$(git rev-parse --short HEAD)
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//       --benchmark_out=docs/perf/data/lora_cpu_DATE.json --benchmark_out_format=json   (one line)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "kernels/gemm/gemm.h"
#include "models/common/weight_table.h"
#include "models/llama/llama.h"
#include "models/lora/gate_head.h"
#include "models/lora/lora_adapter.h"
#if MMSERVE_HAS_CUDA
#include "models/llama/llama_cuda.h"
#endif

namespace {

using namespace mmserve;
namespace fs = std::filesystem;

constexpr int64_t kHidden = 4096, kGateHidden = 256, kAdapters = 100, kPromptTokens = 128, kVocab = 8192;
constexpr int64_t kRank = 16;

// A setup step failed: the numbers would be meaningless, so the bench stops and says why.
void check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "lora_cpu_bench: %s: %s\n", what, status.to_string().c_str());
    std::exit(1);
  }
}

fs::path scratch_dir;  // removed at exit

const fs::path& scratch() {
  if (scratch_dir.empty()) {
    scratch_dir = fs::temp_directory_path() / ("mmserve_lora_cpu_bench_" + std::to_string(::getpid()));
    fs::create_directories(scratch_dir);
    std::atexit([] { fs::remove_all(scratch_dir); });
  }
  return scratch_dir;
}

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

const models::GateHead& gate() {
  static const models::GateHead head = [] {
    const fs::path dir = scratch() / "gate";
    fs::create_directories(dir);
    // PyTorch's Linear init range (1/sqrt(fan_in)), so the softmax is not saturated.
    const std::vector<float> w1 = random_floats(kGateHidden * kHidden, 1 / 64.0f, 1),
                             b1 = random_floats(kGateHidden, 1 / 64.0f, 2);
    const std::vector<float> w2 = random_floats(kAdapters * kGateHidden, 1 / 16.0f, 3),
                             b2 = random_floats(kAdapters, 1 / 16.0f, 4);
    check(write_safetensors((dir / "gate.safetensors").string(),
                            {{"gate.0.weight", DType::kF32, {kGateHidden, kHidden}, w1.data()},
                             {"gate.0.bias", DType::kF32, {kGateHidden}, b1.data()},
                             {"gate.2.weight", DType::kF32, {kAdapters, kGateHidden}, w2.data()},
                             {"gate.2.bias", DType::kF32, {kAdapters}, b2.data()}}),
          "writing the gate");
    nlohmann::json names = nlohmann::json::array();
    for (int64_t i = 0; i < kAdapters; ++i) names.push_back("adapter-" + std::to_string(i));
    std::ofstream(dir / "gate.json") << nlohmann::json{{"adapters", names}}.dump();
    auto loaded = models::GateHead::load((dir / "gate.safetensors").string());
    check(loaded.status(), "loading the gate");
    return std::move(*loaded);
  }();
  return head;
}

// The decoder's embedding table alone, through the loader the server uses (F32Weights), under a LlamaModel of
// no layers: mean_input_embedding reads nothing else.
const models::LlamaModel& embeddings() {
  static const std::unique_ptr<models::LlamaModel> model = [] {
    const fs::path dir = scratch() / "embed";
    fs::create_directories(dir);
    const std::vector<float> table = random_floats(kVocab * kHidden, 0.05f, 5);
    check(write_safetensors((dir / "model.safetensors").string(),
                            {{"model.embed_tokens.weight", DType::kF32, {kVocab, kHidden}, table.data()}}),
          "writing the embedding table");
    auto store = WeightStore::open_model_dir(dir.string());
    check(store.status(), "opening the embedding table");
    auto weights = models::F32Weights::load(**store, {{"model.embed_tokens.weight", {kVocab, kHidden}}});
    check(weights.status(), "reading the embedding table");
    models::LlamaConfig config;
    config.vocab_size = kVocab, config.hidden_size = kHidden, config.num_hidden_layers = 0;
    return models::LlamaModel::from_weights(config, std::shared_ptr<const models::F32Weights>(std::move(*weights)), {});
  }();
  return *model;
}

// A prompt's ids spread over the table (the rows are not neighbours in memory).
std::vector<int32_t> prompt(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(kPromptTokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kVocab);
  return ids;
}

void bm_gate_mean(benchmark::State& state) {
  const models::LlamaModel& model = embeddings();
  uint32_t seed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<int32_t> ids = prompt(++seed);  // another prompt each time: its rows are not in cache
    state.ResumeTiming();
    auto e = model.mean_input_embedding(ids);
    benchmark::DoNotOptimize(e);
  }
}

void bm_gate_route(benchmark::State& state) {
  const models::GateHead& head = gate();
  const std::vector<float> e = random_floats(kHidden, 0.05f, 6);
  for (auto _ : state) {
    auto choice = head.route(e, 2);
    benchmark::DoNotOptimize(choice);
  }
  state.counters["adapters"] = kAdapters;
}

// The same MLP through the project's Linear (kernels/gemm: OpenBLAS), softmax and top-2 left out: what route()'s two
// products could cost (its loops are one serial f32 sum per output, which the compiler may not reorder).
void bm_gate_route_linear(benchmark::State& state) {
  const models::GateHead& head = gate();
  std::vector<float> e = random_floats(kHidden, 0.05f, 6), hidden(kGateHidden), logits(kAdapters);
  auto view = [](const std::vector<float>& v, std::vector<int64_t> shape) {
    return Tensor(const_cast<float*>(v.data()), DType::kF32, std::move(shape));
  };
  const Tensor w1 = view(head.w1(), {kGateHidden, kHidden}), b1 = view(head.b1(), {kGateHidden});
  const Tensor w2 = view(head.w2(), {kAdapters, kGateHidden}), b2 = view(head.b2(), {kAdapters});
  Tensor x = view(e, {1, kHidden}), h = view(hidden, {1, kGateHidden}), z = view(logits, {1, kAdapters});
  const int threads = kernels::cpu_threads();
  kernels::set_cpu_threads(1);  // one row: OpenMP's fork and join cost more than the product (measured here)
  for (auto _ : state) {
    kernels::linear(x, w1, &b1, h);
    for (float& v : hidden) v = std::max(v, 0.0f);
    kernels::linear(h, w2, &b2, z);
    benchmark::DoNotOptimize(logits.data());
  }
  kernels::set_cpu_threads(threads);
}

void bm_gate_request(benchmark::State& state) {
  const models::LlamaModel& model = embeddings();
  const models::GateHead& head = gate();
  uint32_t seed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const std::vector<int32_t> ids = prompt(++seed);
    state.ResumeTiming();
    auto e = model.mean_input_embedding(ids);
    if (!e.ok()) check(e.status(), "the mean embedding");
    auto choice = head.route(*e, 2);
    benchmark::DoNotOptimize(choice);
  }
}

models::LlamaConfig llama3_8b() {
  models::LlamaConfig c;
  c.vocab_size = 128256, c.hidden_size = kHidden, c.intermediate_size = 14336, c.num_hidden_layers = 32;
  c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 128;
  return c;
}

// PEFT's files for a rank-16 adapter on every linear of llama3_8b(), saved in `dtype` (bf16 as PEFT saves a bf16
// model's adapter, f32 as it saves an f32 one's); the same values either way.
const std::string& adapter_dir(DType dtype = DType::kBF16) {
  static std::map<DType, std::string> dirs;
  std::string& dir = dirs[dtype];
  if (!dir.empty()) return dir;
  const fs::path d = scratch() / (std::string("adapter_") + dtype_name(dtype));
  fs::create_directories(d);
  const models::LlamaConfig c = llama3_8b();
  std::vector<std::vector<uint8_t>> storage;
  std::vector<TensorToWrite> tensors;
  uint32_t seed = 100;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int t = 0; t < models::kLoraTargets; ++t) {
      const auto target = static_cast<models::LoraTarget>(t);
      const auto [in, out] = models::lora_target_features(c, target);
      const std::string group = t < 4 ? "self_attn." : "mlp.";
      const std::string module =
          "base_model.model.model.layers." + std::to_string(l) + "." + group + models::lora_target_name(target);
      for (const auto& [suffix, shape] : {std::pair<std::string, std::vector<int64_t>>{".lora_A.weight", {kRank, in}},
                                          {".lora_B.weight", {out, kRank}}}) {
        const std::vector<float> values = random_floats(static_cast<size_t>(shape[0] * shape[1]), 0.02f, ++seed);
        std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
        convert_from_f32(values.data(), dtype, bytes.data(), static_cast<int64_t>(values.size()));
        storage.push_back(std::move(bytes));
        tensors.push_back({module + suffix, dtype, shape, storage.back().data()});
      }
    }
  }
  check(write_safetensors((d / "adapter_model.safetensors").string(), tensors), "writing the adapter");
  std::ofstream(d / "adapter_config.json") << R"({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 16,
    "lora_alpha": 32, "lora_dropout": 0.0, "bias": "none", "use_rslora": false, "use_dora": false,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]})";
  dir = d.string();
  return dir;
}

// Loads `dtype`'s adapter with `pack` (null: f32 copies) once to warm the page cache, then times loads, each followed
// by `after` when given; freeing each is left out (the unload's cost), and so is `between` (run after each free).
void time_loads(
    benchmark::State& state, DType dtype, const models::LoraImagePacker& pack,
    const std::function<void()>& between = [] {}, const std::function<Status(models::LoraAdapter&)>& after = nullptr) {
  const std::string& dir = adapter_dir(dtype);
  const models::LlamaConfig config = llama3_8b();
  check(models::load_lora_adapter(dir, "warm", config, {"model."}, pack).status(), "loading the adapter");
  int64_t bytes = 0;
  bool imaged = false, pinned = false;
  for (auto _ : state) {
    auto adapter = models::load_lora_adapter(dir, "bench", config, {"model."}, pack);
    if (!adapter.ok()) check(adapter.status(), "loading the adapter");
    if (after) check(after(**adapter), "after the load");
    std::shared_ptr<const models::LoraAdapter> loaded = std::move(*adapter);
    benchmark::DoNotOptimize(loaded);
    state.PauseTiming();
    bytes = loaded->bytes();
    imaged = loaded->slot_image != nullptr && loaded->slot_image->bytes > 0;
    pinned = imaged && loaded->slot_image->pinned;
    loaded.reset();
    between();
    state.ResumeTiming();
  }
  state.counters["file_MB"] = static_cast<double>(fs::file_size(fs::path(dir) / "adapter_model.safetensors")) / 1e6;
  state.counters["host_MB"] = static_cast<double>(bytes) / 1e6;  // f32 copies, or the slot image
  if (imaged) {
    state.counters["pinned"] = pinned ? 1 : 0;
    state.SetLabel(pinned ? "pinned" : "pageable");
  }
}

void bm_adapter_load(benchmark::State& state, DType file) {
  time_loads(state, file, nullptr);
}

// The checks alone: a packer that copies nothing (what every load pays before its bulk pass).
void bm_adapter_load_checks(benchmark::State& state) {
  time_loads(state, DType::kBF16,
             [](const models::LoraAdapter&,
                const models::LoraFileModules&) -> StatusOr<std::shared_ptr<const models::LoraSlotImage>> {
               return std::make_shared<const models::LoraSlotImage>();
             });
}

#if MMSERVE_HAS_CUDA
// A GPU model's load, as LlamaExecutor::load_adapter runs it: the slot image of a bf16 model with max_lora_rank 16
// packed from the file. pooled: the unloaded image's buffer kept for the next load (the server's steady state);
// fresh: the pool emptied after each unload, so every load allocates (and on the GPU host pins) its 84 MB.
void bm_adapter_load_gpu(benchmark::State& state, DType file, bool pooled) {
  const models::LlamaConfig config = llama3_8b();
  time_loads(
      state, file,
      [config](const models::LoraAdapter& a, const models::LoraFileModules& stored) {
        return models::LlamaCudaModel::pack_lora_slot_image_from_file(a, stored, config, DType::kBF16, kRank);
      },
      [pooled] {
        if (!pooled) models::LlamaCudaModel::lora_image_pool_clear();
      });
}

// The GPU model's load before the file packer, the baseline in the same run: the loader's f32 copies, then the image
// packed from them (the backend's prepare_adapter did that) into a fresh buffer (there was no pool).
void bm_adapter_load_gpu_via_f32(benchmark::State& state) {
  const models::LlamaConfig config = llama3_8b();
  time_loads(
      state, DType::kBF16, nullptr, [] { models::LlamaCudaModel::lora_image_pool_clear(); },
      [config](models::LoraAdapter& a) -> Status {
        ASSIGN_OR_RETURN(a.slot_image, models::LlamaCudaModel::pack_lora_slot_image(a, config, DType::kBF16, kRank));
        return ok_status();
      });
}
#endif

// The conversion alone, one thread. prefaulted: into vectors allocated (and faulted in) once, the floor;
// zero_filled: into fresh std::vector<float>(n) each time, as load_lora_adapter did before it appended chunks
// (the page faults of the f32 copy, its zero fill, then the conversion's writes).
void bm_adapter_convert(benchmark::State& state, bool fresh) {
  auto file = SafetensorsFile::open(adapter_dir() + "/adapter_model.safetensors");
  check(file.status(), "mapping the adapter");
  std::vector<std::vector<float>> out;
  for (const auto& [name, info] : (*file)->tensors()) out.emplace_back(static_cast<size_t>(info.numel()));
  for (auto _ : state) {
    if (fresh) {
      state.PauseTiming();
      out.clear();
      state.ResumeTiming();
    }
    size_t i = 0;
    for (const auto& [name, info] : (*file)->tensors()) {
      if (fresh) out.emplace_back(static_cast<size_t>(info.numel()));
      convert_to_f32(info.dtype, info.data, out[i++].data(), info.numel());
    }
    benchmark::DoNotOptimize(out.data());
  }
}

BENCHMARK(bm_gate_mean)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_gate_route)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_gate_route_linear)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_gate_request)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_adapter_load, bf16_file, DType::kBF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_adapter_load, f32_file, DType::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_adapter_load_checks)->Unit(benchmark::kMillisecond)->UseRealTime();
#if MMSERVE_HAS_CUDA
BENCHMARK_CAPTURE(bm_adapter_load_gpu, bf16_file_pooled, DType::kBF16, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_adapter_load_gpu, bf16_file_fresh, DType::kBF16, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(bm_adapter_load_gpu, f32_file_pooled, DType::kF32, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(bm_adapter_load_gpu_via_f32)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif
BENCHMARK_CAPTURE(bm_adapter_convert, prefaulted, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(bm_adapter_convert, zero_filled, true)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
