// Per-model serving configuration: the optional `mmserve.yaml` beside a model's config.json, with defaults.
//
//   device: cpu                 # cpu | cuda | cuda:N (cuda: the CUDA backend, CUDA graphs per batch bucket) |
//                               # cuda:all (one replica per visible GPU, counted at load)
//   devices: [cuda:0, cuda:1]   # replicas spread over these devices round-robin (exclusive with `device`;
//                               # entries as for `device` but not cuda:all; cpu allowed, a device may repeat)
//   dtype: auto                 # auto | f32 | f16 | bf16
//   instances: 0                # executors = replicas, each with its own engine thread; 0 (the default) = one
//                               # per device of `devices` / cuda:all, else 1; never fewer than the devices
//   tensor_parallel: 1          # cuda (CLIP, Whisper): each replica spans this many GPUs (Megatron-style
//                               # sharding, NCCL all-reduces); the devices are cut into consecutive groups of this
//                               # size, and `instances` counts groups (docs/multi-gpu.md)
//   tp_collective: nccl         # nccl | staged: the sums through host memory, so a group may list one GPU more
//                               # than once (a check of a sharded configuration on one GPU; slow, not for serving)
//   pipeline_parallel: 1        # CLIP on cuda: 2 = each replica is two pipeline stages on two GPUs (grouped
//                               # as tensor_parallel is; the two cannot be combined yet)
//   vision_micro_batch: 8       # pipeline parallel: images per micro-batch
//   text_micro_batch: 4         # pipeline parallel: texts per micro-batch
//   max_batch_size: 64
//   batch_buckets: [1, 2, 4, 8, 16, 32, 64]
//   max_queue_delay_ms: 5       # how long the batcher waits to fill a batch
//   queue_size: 256             # requests waiting per model; beyond it: 429
//   priority_levels: 3          # 1 = highest .. N
//   default_priority: 2
//   default_timeout_ms: 0       # 0 = none; otherwise a deadline for requests that set none
//   memory_quota_mb: 0          # 0 = unlimited; loading refuses a model whose weights + arena exceed it
//   threads: 0                  # CPU threads of the engine (0 = all)
//   preempt_chunk_ms: 5         # qos: a batch runs in chunks of about this much engine time (CLIP's towers by
//                               # measured chunk times, engine/chunk_cost.h), and requests of a better priority that arrived
//                               # meanwhile run between chunks (0 = never); docs/perf/priority.md measured 5 vs 20
//   audio_seconds_max: 7200     # Whisper: longer audio is refused (413), from the header, then while decoding
//   audio_bytes_max: 268435456  # Whisper: larger encoded audio files are refused (413) before decoding
//                               # (the HTTP body limit, --max-body-mb, applies first)
//   decoder_rows: 0             # Whisper: decoder rows in flight at once (beams and best_of samples of the
//                               # batch's requests; more wait). 0 = max(max_batch_size, 5) on cuda, unbounded on
//                               # cpu; else >= 5
//   cross_kv: same              # Whisper on cuda: cross-attention K/V as same (the compute dtype) | fp8_e4m3 |
//                               # int8 (half the memory of f16; docs/perf/whisper_gpu.md has the cost)
//   options: {embedding_cache_mb: 512}   # the family's own keys (engine/families.h), checked by the family:
//                               # SAM: embedding_cache_mb; CLIP: image_decode (preprocess | batch | stage:
//                               # where PNGs are decoded, engine/clip_executor.h ClipOptions)
// Unknown keys and wrong types are errors naming the file and the key. The family-specific keys (cross_kv,
// decoder_rows, vision_micro_batch, text_micro_batch and everything under `options`) also go to the family in
// `family_options`, which refuses the keys that are not its own.
// Tests: tests/unit/serving/model_config_test.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mmserve::serving {

struct ModelConfig {
  std::string device = "cpu";
  std::vector<std::string> devices;  // empty: every replica on `device`
  std::string dtype = "auto";
  int instances = 0;  // 0 = one per device (see replica_devices)
  int max_batch_size = 64;
  std::vector<int> batch_buckets = {1, 2, 4, 8, 16, 32, 64};
  double max_queue_delay_ms = 5.0;
  int queue_size = 256;
  int priority_levels = 3;
  int default_priority = 2;
  double default_timeout_ms = 0;
  int64_t memory_quota_mb = 0;
  int threads = 0;
  double preempt_chunk_ms = 5;
  double audio_seconds_max = 7200;
  int64_t audio_bytes_max = 256LL << 20;
  std::string cross_kv = "same";
  int decoder_rows = 0;
  int tensor_parallel = 1;
  std::string tp_collective = "nccl";
  int pipeline_parallel = 1;
  int vision_micro_batch = 8;
  int text_micro_batch = 4;
  // The family-specific keys the file sets, as JSON (engine/families.h): the flat ones above when given, and
  // the `options` mapping.
  nlohmann::json family_options = nlohmann::json::object();
};

// Parses YAML text (`label` names it in errors); missing keys keep their defaults.
StatusOr<ModelConfig> parse_model_config(const std::string& yaml_text, const std::string& label);
// Reads DIR/mmserve.yaml if present, else the defaults.
StatusOr<ModelConfig> load_model_config(const std::string& model_dir);
// The checks parse_model_config applies, for configs built in code: buckets positive and strictly increasing
// with the last >= max_batch_size, max_batch_size >= 1, 1 <= default_priority <= priority_levels <= 64, ...
Status validate_model_config(const ModelConfig& config, const std::string& label);
// The device of each replica (instance), in replica order: `devices` (or cuda:0..visible_gpus-1 for
// `device: cuda:all`, or `device` alone) repeated round-robin up to `instances` (0: one per device).
// kInvalidArgument when instances is below the number of devices (a listed device would stay idle);
// kUnavailable for cuda:all with no visible GPU. `label` names the file in errors.
StatusOr<std::vector<Device>> replica_devices(const ModelConfig& config, int visible_gpus, const std::string& label);
// The GPUs of each replica: with tensor_parallel and pipeline_parallel 1, replica_devices() one each; with either
// N > 1, the listed devices (`devices`, or every visible GPU of cuda:all) cut into consecutive groups of N distinct
// GPUs, repeated round-robin up to `instances` groups (0: one per group). kInvalidArgument when the list does not
// divide into groups, a group repeats a GPU or holds the CPU.
StatusOr<std::vector<std::vector<Device>>> replica_groups(const ModelConfig& config, int visible_gpus,
                                                          const std::string& label);

}  // namespace mmserve::serving
