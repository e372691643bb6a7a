// The serving layer's value types, shared by everything below the InferenceServer facade (the model repository,
// runtimes, the queue) and by its clients: the server configuration, model states and metadata. Split from
// inference_server.h so that no file below the facade includes the facade (that made two include cycles).
// Tests: tests/unit/serving/model_config_test.cpp (the server config), inference_server_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace mmserve::serving {

using engine::QosWeights;

enum class SchedulingPolicy { kFifo, kQos };

struct ServerConfig {
  std::string model_repository;             // each subdirectory is a model named after it
  std::vector<std::string> models_to_load;  // empty = all subdirectories at start-up
  SchedulingPolicy policy = SchedulingPolicy::kQos;
  double aging_ms_per_level = 500;  // a waiting request gains one priority level per this long
  int preprocess_threads = 0;       // 0 = hardware concurrency
  int preprocess_queue = 1024;      // bounded: beyond it requests get 429
  // qos: how much lower (nice) the threads doing low-priority work run: the preprocessing workers outside the
  // class-1 reserve and the HTTP workers serving requests whose x-mmserve-priority header is > 1. 0 = off.
  int background_nice = 10;
  int64_t max_image_pixels = 64LL * 1024 * 1024;
  QosWeights qos;
  std::string device_override;  // `serve --device`: replaces every model's `device` ("" = each its own)
  // LoRA adapters loaded at start (`serve --lora-modules name=DIR[@model]`, vLLM's flag): onto `model`, or the one
  // loaded model that takes adapters when it is empty.
  struct LoraModuleSpec {
    std::string name, dir, model;
  };
  std::vector<LoraModuleSpec> lora_modules;
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING): off, they
  // answer 403, since they read any directory the server can.
  bool allow_runtime_lora_updating = false;
};

// A LoRA adapter the server holds (GET /v2/adapters, /v1/models): its base model and what the executor reports.
struct AdapterStatus {
  std::string parent;
  engine::AdapterInfo info;
  std::string loaded_on;  // "cpu", "cuda:0", ...
};

// The server-wide YAML (`mmserve serve --config FILE`); every key is optional, unknown keys and wrong types
// are kInvalidArgument naming the file and the key:
//   model_repository: /models
//   models_to_load: [clip-a, clip-b]   # default: every subdirectory
//   policy: qos                        # fifo | qos
//   aging_ms_per_level: 500            # 0 = no aging
//   preprocess_threads: 0
//   preprocess_queue: 1024
//   background_nice: 10                # qos: 0..19, lower OS priority of low-priority work's threads (0 = off)
//   max_image_pixels: 67108864
//   qos: {image: 0.4, audio: 0.35, text: 0.25, image_tokens_max: 4096, audio_seconds_max: 60, text_chars_max: 512}
StatusOr<ServerConfig> parse_server_config(const std::string& yaml_text, const std::string& label);
StatusOr<ServerConfig> load_server_config(const std::string& path);
// The value checks both apply (also run by InferenceServer::create on a config built in code).
Status validate_server_config(const ServerConfig& config, const std::string& label);

enum class ModelState { kUnavailable, kLoading, kReady, kUnloading, kFailed };
const char* model_state_name(ModelState state);  // "UNAVAILABLE", "LOADING", "READY", ...

struct ModelStatus {
  std::string name;
  std::string version = "1";
  ModelState state = ModelState::kUnavailable;
  std::string reason;        // why it failed or is unavailable
  std::string architecture;  // "CLIPModel"
  double load_seconds = 0;
  int64_t memory_bytes = 0;  // weights + arenas
};

using engine::TensorSpec;

// One replica (instance) of a model: where it runs and whether it is in rotation.
struct ReplicaInfo {
  int index = 0;
  std::string device;  // "cpu", "cuda:1"
  bool healthy = true;
  std::string fault;  // why it was taken out of rotation (empty while healthy)
};

struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;  // the family's: "mmserve_clip", "mmserve_whisper", "mmserve_sam"
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  int64_t embedding_dim = 0;
  int64_t image_size = 0;
  int64_t max_text_tokens = 0;
  std::vector<ReplicaInfo> replicas;  // in replica order
};

}  // namespace mmserve::serving
