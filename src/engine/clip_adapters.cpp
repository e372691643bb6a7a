// ClipExecutor's LoRA adapters (see clip_executor.h, issue 16): each a merged copy of the model on this executor's
// device (models/clip/clip_lora.h), built on the loading thread; the engine thread only looks copies up.
// Tests: tests/conformance/clip_lora_hf_test.cpp (PEFT's embeddings), tests/e2e/lora_server_test.cpp (served).
#include "engine/clip_executor.h"

namespace mmserve::engine {

Status ClipExecutor::load_adapter(const std::string& name, const std::string& dir) {
  if (name.empty() || name.size() > 128) return invalid_argument("an adapter's name must have 1..128 characters");
  {
    std::lock_guard<std::mutex> lock(adapters_mutex_);
    if (adapters_.count(name) > 0) return Status(StatusCode::kAlreadyExists, "adapter '" + name + "' is already loaded");
  }
  auto adapter = std::make_shared<AdapterModel>();
  ASSIGN_OR_RETURN(adapter->lora, models::load_clip_lora(dir, name, config_));
#if MMSERVE_HAS_CUDA
  if (cuda_model_) {
    models::ClipCudaOptions options = cuda_options_;
    options.merge_lora = adapter->lora;
    ASSIGN_OR_RETURN(adapter->cuda_model, models::ClipCudaModel::load(model_dir_, options));
  }
#endif
  if (model_) {
    ASSIGN_OR_RETURN(adapter->model, models::ClipModel::load(model_dir_, adapter->lora.get()));
  }
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  if (!adapters_.emplace(name, std::move(adapter)).second) {  // another load of the name finished first
    return Status(StatusCode::kAlreadyExists, "adapter '" + name + "' is already loaded");
  }
  return ok_status();
}

Status ClipExecutor::unload_adapter(const std::string& name, bool /*fail_running*/) {
  // A CLIP batch is short (milliseconds): one running under the adapter finishes on its copy either way.
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  if (adapters_.erase(name) == 0) return not_found("no adapter '" + name.substr(0, 128) + "' is loaded");
  return ok_status();
}

StatusOr<std::shared_ptr<ClipExecutor::AdapterModel>> ClipExecutor::adapter_model(const std::string& name) const {
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  const auto it = adapters_.find(name);
  if (it == adapters_.end()) return not_found("no adapter '" + name.substr(0, 128) + "' is loaded on this model");
  return it->second;
}

std::vector<AdapterInfo> ClipExecutor::adapter_list() const {
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  std::vector<AdapterInfo> out;
  for (const auto& [name, a] : adapters_) {
    AdapterInfo info;
    info.name = name, info.dir = a->lora->file.dir, info.modality = a->lora->modality();
    info.rank = a->lora->file.max_rank, info.targets = a->lora->target_names();
    info.bytes = a->lora->file.bytes();
    info.hot_swappable = false;  // merged into its own copy of the model, not swapped in per request
    info.requests = a->requests.load();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace mmserve::engine
