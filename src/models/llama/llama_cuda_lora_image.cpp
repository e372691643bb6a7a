// LlamaCudaModel's LoRA slot images (see llama_cuda.h, lora_adapter.h's LoraSlotImage; issue 16): an adapter's
// matrices laid out as one device slot holds them, in the model's dtype, packed once at load on the loader's thread so
// that making the adapter resident is a few host-to-device copies (llama_cuda_lora.cpp). Two sources give the same
// bytes: the adapter's f32 copies, or the safetensors file's own bytes as load_lora_adapter validated them (a GPU
// model's load: no f32 copy, and a bf16 adapter into a bf16 model is row copies). The buffers are pinned when the GPU
// can pin them and reused from unloaded adapters' images (a small pool), since pinning is a large share of a load.
// Host code only: tests/unit/models/llama_cuda_lora_image_test.cpp and llama_cuda_test's
// TheSlotImageHoldsEachModuleWhereTheSlotReadsIt run without a GPU; bench/lora_cpu_bench.cpp times the load.
#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_status.h"
#include "models/llama/llama_cuda.h"

namespace mmserve::models {
namespace {

// The freed images' host buffers, handed to the next image of the same byte size instead of a cudaFreeHost and a
// cudaHostAlloc (pinning 84 MB page by page costs tens of ms; every adapter with the same targets has the same size
// in one model, so an unload followed by a load is the common case). Keeps the kKept most recently freed buffers and
// frees older ones: at most 2 images' memory sits idle. Thread-safe: loads run on any thread, and an image's last
// holder (an engine's slot copy, a request) may free it on another. Each buffer's deleter holds the pool, so the pool
// outlives every image and frees what it keeps at exit. Pageable buffers (no usable GPU) are pooled the same way.
class ImagePool {
 public:
  static constexpr size_t kKept = 2;

  static const std::shared_ptr<ImagePool>& get() {
    static const std::shared_ptr<ImagePool> pool = std::make_shared<ImagePool>();
    return pool;
  }
  ~ImagePool() {
    for (const Buffer& b : kept_) release(b);
  }

  // `bytes` of host memory, not cleared (the packer writes every byte); *pinned says whether cudaHostAlloc made it.
  std::shared_ptr<uint8_t> take(size_t bytes, bool* pinned) {
    Buffer b;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
        if (it->bytes == bytes) {
          b = *it;
          kept_.erase(std::next(it).base());
          break;
        }
      }
    }
    if (b.data == nullptr) b = allocate(bytes);
    *pinned = b.pinned;
    return std::shared_ptr<uint8_t>(b.data, [pool = get(), b](uint8_t*) { pool->give_back(b); });
  }
  size_t kept_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t total = 0;
    for (const Buffer& b : kept_) total += b.bytes;
    return total;
  }
  void clear() {
    std::deque<Buffer> kept;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kept.swap(kept_);
    }
    for (const Buffer& b : kept) release(b);
  }

 private:
  struct Buffer {
    uint8_t* data = nullptr;
    size_t bytes = 0;
    bool pinned = false;
  };
  static Buffer allocate(size_t bytes) {
    void* memory = nullptr;  // pinned: the copies then run at the bus's speed and never block the engine thread
    if (cudaHostAlloc(&memory, bytes, cudaHostAllocPortable) == cudaSuccess) {
      return {static_cast<uint8_t*>(memory), bytes, true};
    }
    (void)cudaGetLastError();  // pageable fallback: correct, slower copies
    return {new uint8_t[bytes], bytes, false};
  }
  static void release(const Buffer& b) {
    if (b.pinned) {
      cudaFreeHost(b.data);
    } else {
      delete[] b.data;
    }
  }
  void give_back(const Buffer& b) {
    Buffer oldest;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kept_.push_back(b);
      if (kept_.size() <= kKept) return;
      oldest = kept_.front();
      kept_.pop_front();
    }
    release(oldest);  // outside the lock: unpinning takes milliseconds
  }

  std::mutex mutex_;
  std::deque<Buffer> kept_;  // oldest first
};

// One matrix to put: its bytes (row-major, no padding) and their dtype: an f32 copy's, or the file's.
struct Source {
  const uint8_t* data = nullptr;
  DType dtype = DType::kF32;
};
struct ModuleSource {
  Source a, b;  // [rank, in], [out, rank]; null for a module the adapter leaves alone
};
using Sources = std::vector<std::array<ModuleSource, kLoraTargets>>;  // [layer][target]

Status check_packable(const LoraAdapter& adapter, const LlamaConfig& c, int64_t max_lora_rank) {
  if (adapter.max_rank > max_lora_rank) {
    return invalid_argument("adapter '" + adapter.name + "' has rank " + std::to_string(adapter.max_rank) +
                            "; this model's slots hold rank " + std::to_string(max_lora_rank) + " (max_lora_rank)");
  }
  if (static_cast<int64_t>(adapter.layers.size()) != c.num_hidden_layers) {
    return invalid_argument("adapter '" + adapter.name + "' was read for another model (its layer count)");
  }
  if (adapter.adapts_experts()) {  // a slot holds no expert matrices: the GPU forward would leave them out
    return unimplemented("adapter '" + adapter.name + "': LoRA on Mixtral's experts runs on the CPU path only");
  }
  return ok_status();
}

// `n` values from `s` to `d` (f32, f16 or bf16 each): a copy when they agree, else through f32 in an L1-sized buffer,
// so f32 -> bf16 here rounds as f32_to_bf16 of the f32 copy did (the two sources give the same bits).
void convert_run(const uint8_t* from, DType s, int64_t n, DType d, uint8_t* to) {
  if (s == d) {
    std::memcpy(to, from, storage_bytes(d, n));
    return;
  }
  if (d == DType::kF32) {
    convert_to_f32(s, from, reinterpret_cast<float*>(to), n);
    return;
  }
  constexpr int64_t kChunk = 2048;
  float buffer[kChunk];
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t count = std::min(kChunk, n - at);
    convert_to_f32(s, from + storage_bytes(s, at), buffer, count);
    convert_from_f32(buffer, d, to + storage_bytes(d, at), count);
  }
}

// [rows, cols] of `from` -> `ld`-strided rows in d, zeros after `cols` up to `ld` (the slot's padding past the rank:
// never read, but the image is deterministic). Without padding the matrix is one run (B at rank r_max: rows of 16).
void put(Source from, int64_t rows, int64_t cols, int64_t ld, DType d, uint8_t* to) {
  if (cols == ld) cols *= rows, ld = cols, rows = 1;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = to + storage_bytes(d, r * ld);
    convert_run(from.data + storage_bytes(from.dtype, r * cols), from.dtype, cols, d, row);
    std::memset(row + storage_bytes(d, cols), 0, storage_bytes(d, ld - cols));
  }
}

// The image of `adapter` (checked by check_packable) with its matrices from `sources`.
std::shared_ptr<const LoraSlotImage> pack(const LoraAdapter& adapter, const Sources& sources, const LlamaConfig& c,
                                          DType d, int64_t max_lora_rank) {
  const int64_t layers = c.num_hidden_layers, r_max = (max_lora_rank + 7) / 8 * 8;
  auto image = std::make_shared<LoraSlotImage>();
  image->dtype = d, image->r_max = r_max;
  size_t at = 0;
  std::vector<std::pair<size_t, size_t>> arrays;  // (offset, bytes): the gaps after them are zeroed
  // 256-byte aligned: every copy starts on a DMA-friendly boundary.
  auto place = [&](size_t bytes) {
    const size_t offset = at;
    at += (bytes + 255) / 256 * 256;
    arrays.emplace_back(offset, bytes);
    return offset;
  };
  for (int t = 0; t < kLoraTargets; ++t) {
    bool anywhere = false;
    for (int64_t l = 0; l < layers && !anywhere; ++l)
      anywhere = adapter.module(l, static_cast<LoraTarget>(t)).present();
    if (!anywhere) continue;
    const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
    image->a_bytes[t] = storage_bytes(d, layers * r_max * in), image->a_offset[t] = place(image->a_bytes[t]);
    image->b_bytes[t] = storage_bytes(d, layers * out * r_max), image->b_offset[t] = place(image->b_bytes[t]);
  }
  const int64_t params = layers * kLoraTargets;
  image->ranks_offset = place(storage_bytes(DType::kI32, params));
  image->scales_offset = place(storage_bytes(DType::kF32, params));
  image->bytes = at;
  image->memory = ImagePool::get()->take(at, &image->pinned);
  uint8_t* base = image->memory.get();
  for (const auto& [offset, bytes] : arrays) std::memset(base + offset + bytes, 0, (bytes + 255) / 256 * 256 - bytes);
  auto* ranks = reinterpret_cast<int32_t*>(base + image->ranks_offset);
  auto* scales = reinterpret_cast<float*>(base + image->scales_offset);
  // 84 MB for a rank-16 adapter on every linear of an 8B model, memory-bound: the modules go to a few threads (the
  // loader's thread waits for them; the engine's never does), each writing its module's share of the image once (no
  // serial memset of the whole image first).
  const int64_t modules = layers * kLoraTargets;
  const int threads = static_cast<int>(std::min<int64_t>(lora_load_threads(at), modules));
#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (int64_t index = 0; index < modules; ++index) {
    const int64_t l = index / kLoraTargets;
    const int t = static_cast<int>(index % kLoraTargets);
    const LoraModule& m = adapter.module(l, static_cast<LoraTarget>(t));
    ranks[index] = static_cast<int32_t>(m.rank);
    scales[index] = m.present() ? m.scale : 0.0f;
    if (image->a_bytes[t] == 0) continue;  // adapted in no layer: the slot keeps no arrays for it
    const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
    uint8_t* a = base + image->a_offset[t] + storage_bytes(d, l * r_max * in);
    uint8_t* b = base + image->b_offset[t] + storage_bytes(d, l * out * r_max);
    if (!m.present()) {  // this layer's share of a target other layers adapt
      std::memset(a, 0, storage_bytes(d, r_max * in));
      std::memset(b, 0, storage_bytes(d, out * r_max));
      continue;
    }
    const ModuleSource& from = sources[l][t];
    put(from.a, m.rank, in, in, d, a);  // the first `rank` rows, then zero rows to r_max
    std::memset(a + storage_bytes(d, m.rank * in), 0, storage_bytes(d, (r_max - m.rank) * in));
    put(from.b, out, m.rank, r_max, d, b);
  }
  return image;
}

}  // namespace

StatusOr<std::shared_ptr<const LoraSlotImage>> LlamaCudaModel::pack_lora_slot_image(const LoraAdapter& adapter,
                                                                                    const LlamaConfig& c, DType d,
                                                                                    int64_t max_lora_rank) {
  RETURN_IF_ERROR(check_packable(adapter, c, max_lora_rank));
  Sources sources(adapter.layers.size());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int t = 0; t < kLoraTargets; ++t) {
      const LoraModule& m = adapter.module(l, static_cast<LoraTarget>(t));
      if (!m.present()) continue;
      const auto [in, out] = lora_target_features(c, static_cast<LoraTarget>(t));
      if (m.a.size() != static_cast<size_t>(m.rank * in) || m.b.size() != static_cast<size_t>(out * m.rank)) {
        return failed_precondition("adapter '" + adapter.name +
                                   "' holds no f32 matrices to pack (it was packed from its file at load, for a model "
                                   "of another dtype or max_lora_rank)");
      }
      sources[l][t] = {{reinterpret_cast<const uint8_t*>(m.a.data()), DType::kF32},
                       {reinterpret_cast<const uint8_t*>(m.b.data()), DType::kF32}};
    }
  }
  return pack(adapter, sources, c, d, max_lora_rank);
}

StatusOr<std::shared_ptr<const LoraSlotImage>> LlamaCudaModel::pack_lora_slot_image_from_file(
    const LoraAdapter& adapter, const LoraFileModules& stored, const LlamaConfig& c, DType d, int64_t max_lora_rank) {
  RETURN_IF_ERROR(check_packable(adapter, c, max_lora_rank));
  if (stored.size() != adapter.layers.size()) return internal_error("a slot image's file views for another adapter");
  Sources sources(adapter.layers.size());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int t = 0; t < kLoraTargets; ++t) {
      const LoraFileModule& f = stored[l][t];
      if (!adapter.layers[l][t].present()) continue;
      if (f.a == nullptr || f.b == nullptr) return internal_error("a slot image's file views miss a module");
      sources[l][t] = {{f.a->data, f.a->dtype}, {f.b->data, f.b->dtype}};
    }
  }
  return pack(adapter, sources, c, d, max_lora_rank);
}

size_t LlamaCudaModel::lora_image_pool_bytes() {
  return ImagePool::get()->kept_bytes();
}

void LlamaCudaModel::lora_image_pool_clear() {
  ImagePool::get()->clear();
}

}  // namespace mmserve::models
