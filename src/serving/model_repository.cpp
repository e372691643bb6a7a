// ModelRepository (see model_repository.h). std::filesystem is used only through its error_code overloads,
// so nothing throws. Tests: tests/unit/serving/inference_server_test.cpp.
#include "serving/model_repository.h"

#include <cstdio>
#include <filesystem>

namespace mmserve::serving {
namespace fs = std::filesystem;
namespace {

constexpr size_t kNameLengthMax = 255;

// True when `path` lies strictly below `root` (both canonical).
bool is_below(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (p == path.end() || *p != *r) return false;
  }
  return p != path.end();
}

}  // namespace

ModelRepository::ModelRepository(std::string root, const RuntimeContext& context)
    : root_(std::move(root)), context_(context) {}

ModelRepository::~ModelRepository() {
  std::vector<std::shared_ptr<ModelRuntime>> runtimes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [name, entry] : entries_) {
      if (entry.runtime) runtimes.push_back(std::move(entry.runtime));
    }
  }
  for (auto& runtime : runtimes) runtime->stop(Status(StatusCode::kUnavailable, "the server is shutting down"));
}

StatusOr<std::unique_ptr<ModelRepository>> ModelRepository::open(const std::string& root,
                                                                 const RuntimeContext& context) {
  if (root.empty()) return invalid_argument("no model repository given");
  std::error_code ec;
  const fs::path canonical = fs::canonical(root, ec);
  if (ec || !fs::is_directory(canonical, ec)) return not_found("model repository " + root + " is not a directory");
  return std::unique_ptr<ModelRepository>(new ModelRepository(canonical.string(), context));
}

Status ModelRepository::validate_name(const std::string& name) {
  if (name.empty() || name.size() > kNameLengthMax) {
    return invalid_argument("model name must have 1.." + std::to_string(kNameLengthMax) + " characters");
  }
  if (name == "." || name == "..") return invalid_argument("model name '" + name + "' is not a directory name");
  for (char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return invalid_argument("model name '" + name + "' may only contain A-Z a-z 0-9 . _ -");
  }
  return ok_status();
}

StatusOr<std::string> ModelRepository::resolve(const std::string& name) const {
  RETURN_IF_ERROR(validate_name(name));
  std::error_code ec;
  const fs::path path = fs::path(root_) / name;
  if (!fs::exists(fs::symlink_status(path, ec))) return not_found("no model '" + name + "' in the repository");
  const fs::path canonical = fs::canonical(path, ec);
  if (ec) return not_found("model '" + name + "': " + ec.message());
  if (!is_below(canonical, fs::path(root_))) {
    return invalid_argument("model '" + name + "' resolves outside the model repository");
  }
  if (!fs::is_directory(canonical, ec)) return not_found("model '" + name + "' is not a directory");
  if (!fs::is_regular_file(canonical / "config.json", ec)) {
    return not_found("model '" + name + "' has no config.json");
  }
  return canonical.string();
}

ModelRepository::Entry& ModelRepository::entry_locked(const std::string& name) {
  auto [it, inserted] = entries_.try_emplace(name);
  if (inserted) {
    it->second.status.name = name;
    it->second.status.reason = "not loaded";
    context_.metrics->ready.with({name}).set(0);
  }
  return it->second;
}

void ModelRepository::set_state_locked(Entry& entry, ModelState state, const std::string& reason) {
  entry.status.state = state;
  entry.status.reason = reason;
  const std::string& name = entry.status.name;
  context_.metrics->ready.with({name}).set(state == ModelState::kReady ? 1 : 0);
  context_.metrics->load_seconds.with({name}).set(entry.status.load_seconds);
  context_.metrics->memory_bytes.with({name}).set(static_cast<double>(entry.status.memory_bytes));
}

std::vector<ModelStatus> ModelRepository::scan() {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (resolve(name).ok()) found.push_back(name);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : found) entry_locked(name);
  std::vector<ModelStatus> out;
  for (const auto& [name, entry] : entries_) out.push_back(entry.status);
  return out;
}

StatusOr<ModelStatus> ModelRepository::status(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it != entries_.end()) return it->second.status;
  }
  RETURN_IF_ERROR(resolve(name).status());
  std::lock_guard<std::mutex> lock(mutex_);
  return entry_locked(name).status;
}

Status ModelRepository::load(const std::string& name) {
  ASSIGN_OR_RETURN(std::string dir, resolve(name));
  std::shared_ptr<std::mutex> lifecycle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& entry = entry_locked(name);
    entry.wanted = true;
    lifecycle = entry.lifecycle;
  }
  std::lock_guard<std::mutex> life(*lifecycle);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& entry = entries_.at(name);
    if (entry.status.state == ModelState::kReady) return ok_status();
    set_state_locked(entry, ModelState::kLoading, "");
  }
  auto config = load_model_config(dir);
  if (config.ok() && !context_.device_override.empty()) config->device = context_.device_override;
  StatusOr<std::shared_ptr<ModelRuntime>> runtime = config.ok()
                                                        ? ModelRuntime::load(name, dir, *config, context_)
                                                        : StatusOr<std::shared_ptr<ModelRuntime>>(config.status());
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_.at(name);
  if (!runtime.ok()) {
    entry.status.load_seconds = 0;
    entry.status.memory_bytes = 0;
    set_state_locked(entry, ModelState::kFailed, runtime.status().to_string());
    return runtime.status().with_context("loading model " + name);
  }
  entry.runtime = *runtime;
  entry.status.architecture = entry.runtime->architecture();
  entry.status.load_seconds = entry.runtime->load_seconds();
  entry.status.memory_bytes = entry.runtime->memory_bytes();
  set_state_locked(entry, ModelState::kReady, "");
  std::fprintf(stderr, "mmserve: loaded model %s (%s) in %.2f s on %s\n", name.c_str(),
               entry.status.architecture.c_str(), entry.status.load_seconds, entry.runtime->description().c_str());
  return ok_status();
}

Status ModelRepository::unload(const std::string& name) {
  RETURN_IF_ERROR(validate_name(name));
  std::shared_ptr<std::mutex> lifecycle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return not_found("unknown model '" + name + "'");
    lifecycle = it->second.lifecycle;
  }
  std::lock_guard<std::mutex> life(*lifecycle);
  std::shared_ptr<ModelRuntime> runtime;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry& entry = entries_.at(name);
    entry.wanted = false;
    if (!entry.runtime) {
      set_state_locked(entry, ModelState::kUnavailable, "unloaded");
      return ok_status();
    }
    runtime = entry.runtime;
    set_state_locked(entry, ModelState::kUnloading, "unloading");
  }
  runtime->stop(Status(StatusCode::kUnavailable, "model " + name + " was unloaded"));
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_.at(name);
  entry.runtime.reset();
  entry.status.memory_bytes = 0;
  set_state_locked(entry, ModelState::kUnavailable, "unloaded");
  return ok_status();
}

StatusOr<std::shared_ptr<ModelRuntime>> ModelRepository::ready_runtime(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return not_found("unknown model '" + name + "'");
  const Entry& entry = it->second;
  if (entry.status.state != ModelState::kReady || !entry.runtime) {
    std::string why = "model " + name + " is " + model_state_name(entry.status.state);
    if (!entry.status.reason.empty()) why += " (" + entry.status.reason + ")";
    return Status(StatusCode::kUnavailable, why);
  }
  return entry.runtime;
}

std::vector<std::shared_ptr<ModelRuntime>> ModelRepository::loaded_runtimes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<ModelRuntime>> out;
  for (const auto& [name, entry] : entries_) {
    if (entry.runtime) out.push_back(entry.runtime);
  }
  return out;
}

bool ModelRepository::wanted_models_ready() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, entry] : entries_) {
    if (entry.wanted && entry.status.state != ModelState::kReady) return false;
  }
  return true;
}

}  // namespace mmserve::serving
