// The families the engine can serve: for each models::Family, how to create an instance (Executor) and the
// model's input preparation (InputPreparer). serving/ and cli/ find a family here and never branch on it.
// Adding a family = its model folder, its executor + preparer, ONE line in families.cpp, and its API codec.
//
// `family_config` is the JSON object of the family-specific keys the model's mmserve.yaml sets
// (serving/model_config.h: the flat keys cross_kv, decoder_rows, vision_micro_batch, text_micro_batch when
// present, and everything under `options:`). Each family reads its own keys and refuses any other with a message
// naming the key, so a key set on the wrong kind of model is an error, never silently ignored.
// Tests: tests/unit/engine/families_test.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/executor.h"
#include "models/registry.h"

namespace mmserve::engine {

struct FamilyOps {
  models::Family family;
  StatusOr<std::unique_ptr<Executor>> (*create_executor)(const std::string& model_dir, const ExecutorOptions& options,
                                                         const nlohmann::json& family_config);
  // `first`: the model's first instance (an executor of this family), for sizes the preparer needs.
  StatusOr<std::unique_ptr<InputPreparer>> (*create_preparer)(const std::string& model_dir, const Executor& first,
                                                              const PreparerOptions& options);
};

// kUnimplemented, naming the family, when the architecture is detected but not served.
StatusOr<const FamilyOps*> find_family(models::Family family);
// OK when find_family() would succeed (mmserve inspect's "supported").
Status check_servable(models::Family family);

// GPUs this process can see, for `device: cuda:all` (0 in a CPU-only build or without a driver): only a count, so
// placement can be decided before any executor exists. The serving layer never calls CUDA itself.
int visible_gpus();

// For the families' option parsing: every key of `config` must be in `known` (kInvalidArgument naming the first
// unknown one and the family).
Status check_known_keys(const nlohmann::json& config, const std::vector<std::string>& known, const std::string& family);

}  // namespace mmserve::engine
