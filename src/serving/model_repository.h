// ModelRepository: the models of one repository directory, their states, and their load/unload lifecycle.
//
// Every subdirectory with a config.json is a model named after it (UNAVAILABLE until loaded). Names coming
// from users are checked before any path is built: [A-Za-z0-9._-]+, not "." or "..", and the directory must
// resolve (std::filesystem::canonical, so symlinks are followed) to a direct or nested entry of the canonical
// repository root: no traversal and no symlink escape. Loading (LOADING -> READY or FAILED with the reason)
// and unloading (UNLOADING -> UNAVAILABLE) of one model are serialised by a per-model lifecycle mutex and run
// without the map's lock, so other models keep serving and loading meanwhile. A FAILED model never takes the
// server down; loading it again retries. Loading a READY model is a no-op (unload first to reload).
// Tests: tests/unit/serving/inference_server_test.cpp (traversal names, symlink escape, broken model,
// quota, unload/load).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/model_runtime.h"
#include "serving/server_types.h"
#include "serving/serving_metrics.h"

namespace mmserve::serving {

class ModelRepository {
 public:
  // `root` must be an existing directory (kNotFound otherwise).
  static StatusOr<std::unique_ptr<ModelRepository>> open(const std::string& root, const RuntimeContext& context);
  ~ModelRepository();  // stops every loaded model
  ModelRepository(const ModelRepository&) = delete;
  ModelRepository& operator=(const ModelRepository&) = delete;

  // kInvalidArgument unless the name is a plain directory name as described above.
  static Status validate_name(const std::string& name);
  // The canonical model directory: kInvalidArgument for bad names and symlink escapes, kNotFound when there
  // is no such directory or it has no config.json.
  StatusOr<std::string> resolve(const std::string& name) const;

  // Adds models that appeared on disk (as UNAVAILABLE) and returns every model, sorted by name.
  std::vector<ModelStatus> scan();
  // The status of one model (looked up on disk when not yet known); kNotFound if there is none.
  StatusOr<ModelStatus> status(const std::string& name);
  // Blocking. Marks the model as wanted (ready() waits for it) whatever the outcome.
  Status load(const std::string& name);
  // Blocking; unloading a model that is not loaded is OK. Marks it as not wanted.
  Status unload(const std::string& name);

  // The runtime of a READY model: kNotFound when unknown, kUnavailable (naming the state) otherwise.
  StatusOr<std::shared_ptr<ModelRuntime>> ready_runtime(const std::string& name) const;
  std::vector<std::shared_ptr<ModelRuntime>> loaded_runtimes() const;
  bool wanted_models_ready() const;

 private:
  struct Entry {
    ModelStatus status;
    std::shared_ptr<ModelRuntime> runtime;
    bool wanted = false;
    std::shared_ptr<std::mutex> lifecycle = std::make_shared<std::mutex>();
  };
  ModelRepository(std::string root, const RuntimeContext& context);
  Entry& entry_locked(const std::string& name);
  void set_state_locked(Entry& entry, ModelState state, const std::string& reason);

  const std::string root_;  // canonical
  const RuntimeContext context_;
  mutable std::mutex mutex_;  // guards entries_ (never held while loading, unloading or serving)
  std::map<std::string, Entry> entries_;
};

}  // namespace mmserve::serving
