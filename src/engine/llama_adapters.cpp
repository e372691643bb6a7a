// LlamaExecutor's LoRA adapter registry (see llama_executor.h, issue 16): adapters loaded and unloaded from any
// thread, looked up by the preparer and the gate (each lookup counts a request), listed for /v2/adapters; an unload
// with fail_running revokes the load so the engine loops end its sequences (LlamaExecutor::run).
// Tests: tests/e2e/lora_server_test.cpp, tests/e2e/cli_test.cpp.
#include <atomic>
#include <mutex>
#include <optional>
#include <set>

#include "engine/decoder_backend.h"
#include "engine/llama_executor.h"

namespace mmserve::engine {

Status LlamaExecutor::load_adapter(const std::string& name, const std::string& dir) {
  if (name.empty() || name.size() > 128) return invalid_argument("an adapter's name must have 1..128 characters");
  if (!options_.device.is_cpu() && lora_slots_ == 0) {
    return failed_precondition("adapter '" + name + "': this GPU model was loaded without LoRA slots (set "
                               "options.max_loras in its mmserve.yaml, or give it adapters at start)");
  }
  auto check_room = [&]() -> Status {  // under adapters_mutex_
    if (adapters_.count(name) > 0) return Status(StatusCode::kAlreadyExists, "adapter '" + name + "' is already loaded");
    if (llama_.max_cpu_loras > 0 && static_cast<int64_t>(adapters_.size()) >= llama_.max_cpu_loras) {
      return resource_exhausted("adapter '" + name + "': " + std::to_string(adapters_.size()) +
                                " adapters are loaded, max_cpu_loras " + std::to_string(llama_.max_cpu_loras) +
                                " (unload one first)");
    }
    return ok_status();
  };
  {
    std::lock_guard<std::mutex> lock(adapters_mutex_);
    RETURN_IF_ERROR(check_room());
  }
  // LLaVA's decoder: PEFT names its modules by the transformers version that trained it.
  const std::vector<std::string> prefixes =
      llava_config_ ? std::vector<std::string>{"model.language_model.", "language_model.model."}
                    : std::vector<std::string>{"model."};
  // On this (the caller's) thread, not the engine's: a GPU model's slot image (its dtype, pinned) packed from the
  // file's bytes, so that making it resident is copies only and no f32 copy is kept. Every replica's backend takes the
  // same image (one dtype and rank per model). Its rank checked first, naming the option.
  models::LoraImagePacker pack;
  if (models::LoraImagePacker gpu = backend_->adapter_packer()) {
    pack = [this, gpu](
               const models::LoraAdapter& a,
               const models::LoraFileModules& stored) -> StatusOr<std::shared_ptr<const models::LoraSlotImage>> {
      if (a.max_rank > llama_.max_lora_rank) {
        return invalid_argument("adapter '" + a.name + "' has rank " + std::to_string(a.max_rank) +
                                "; this model's GPU slots take rank " + std::to_string(llama_.max_lora_rank) +
                                " (options.max_lora_rank)");
      }
      return gpu(a, stored);
    };
  }
  // LLaVA's projector may be adapted too (its linears' names by either transformers version).
  std::optional<models::LoraProjectorShape> projector;
  if (llava_config_) {
    const models::LlavaConfig& c = *llava_config_;
    projector = models::LoraProjectorShape{{"model.multi_modal_projector.", "multi_modal_projector."},
                                           c.vision.hidden_size * static_cast<int64_t>(c.feature_layers.size()),
                                           c.text.hidden_size};
  }
  ASSIGN_OR_RETURN(std::shared_ptr<models::LoraAdapter> adapter,
                   models::load_lora_adapter(dir, name, config_, prefixes, pack, projector ? &*projector : nullptr));
  // Both LLaVA paths (the CPU's LlavaModel, the GPU's LlavaCudaVision) apply it; a path without it refuses here.
  if (adapter->adapts_projector() && !encode_images_lora_) {
    return unimplemented("adapter '" + name + "' adapts LLaVA's multi_modal_projector, which this model's image "
                         "path does not apply (it runs on " + options_.device.to_string() + ")");
  }
  if (adapter->adapts_experts() && !options_.device.is_cpu()) {  // a packer refuses them already; this without one
    return unimplemented("adapter '" + name + "': LoRA on Mixtral's experts runs on the CPU path only (this model " +
                         "runs on " + options_.device.to_string() + ")");
  }
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  RETURN_IF_ERROR(check_room());  // again: another load may have come in while this one read its files
  adapters_.emplace(name, std::move(adapter));
  return ok_status();
}

namespace {

// The loads unloaded with fail_running, by LoraAdapter::id. Process-wide because the registry is on a model's first
// executor while its sequences run on every replica's; ids are never reused, so an id stays revoked (8 bytes per
// such unload) and a reload of the same name is a new id, untouched.
std::mutex revoked_mutex;
std::set<uint64_t> revoked_ids;
std::atomic<uint64_t> revocations{0};

}  // namespace

Status LlamaExecutor::unload_adapter(const std::string& name, bool fail_running) {
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  const auto it = adapters_.find(name);
  if (it == adapters_.end()) return not_found("no adapter '" + name + "' is loaded");
  if (fail_running) {
    std::lock_guard<std::mutex> revoked_lock(revoked_mutex);
    revoked_ids.insert(it->second->id);
    ++revocations;  // after the insert: a step that sees the count finds the id
  }
  adapters_.erase(it);
  adapter_requests_.erase(name);
  return ok_status();
}

bool LlamaExecutor::adapter_revoked(uint64_t id) {
  std::lock_guard<std::mutex> lock(revoked_mutex);
  return revoked_ids.count(id) > 0;
}

uint64_t LlamaExecutor::adapter_revocations() {
  return revocations.load();
}

StatusOr<std::shared_ptr<const models::LoraAdapter>> LlamaExecutor::adapter(const std::string& name) const {
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  const auto it = adapters_.find(name);
  if (it != adapters_.end()) {
    ++adapter_requests_[name];  // every lookup is one request's (the preparer's, or the gate's choice)
    return it->second;
  }
  std::string loaded;
  for (const auto& [n, a] : adapters_) loaded += (loaded.empty() ? "" : ", ") + n;
  return not_found("no adapter '" + name.substr(0, 128) + "' is loaded (" +
                   (loaded.empty() ? std::string("none are") : "loaded: " + loaded) + ")");
}

std::vector<AdapterInfo> LlamaExecutor::adapter_list() const {
  std::lock_guard<std::mutex> lock(adapters_mutex_);
  std::vector<AdapterInfo> out;
  for (const auto& [n, a] : adapters_) {
    AdapterInfo info;
    info.name = n, info.dir = a->dir, info.rank = a->max_rank, info.targets = a->target_names();
    info.bytes = a->bytes();
    const auto count = adapter_requests_.find(n);
    info.requests = count != adapter_requests_.end() ? count->second : 0;
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace mmserve::engine
