// The families table (see families.h). Tests: tests/unit/engine/families_test.cpp.
#include "engine/families.h"

#include <algorithm>

#include "engine/clip_executor.h"
#include "engine/clip_inputs.h"
#include "engine/llama_executor.h"
#include "engine/sam_executor.h"
#include "engine/sam_inputs.h"
#include "engine/whisper_executor.h"
#include "engine/whisper_inputs.h"

#if MMSERVE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace mmserve::engine {
namespace {

// One line per served family.
constexpr FamilyOps kFamilies[] = {
    {models::Family::kClip, &ClipExecutor::create_for_server, &ClipInputs::create_for_server},
    {models::Family::kWhisper, &WhisperExecutor::create_for_server, &WhisperInputs::create_for_server},
    {models::Family::kSam, &SamExecutor::create_for_server, &SamInputs::create_for_server},
    {models::Family::kLlama, &LlamaExecutor::create_for_server, &LlamaInputs::create_for_server},
};

}  // namespace

StatusOr<const FamilyOps*> find_family(models::Family family) {
  for (const FamilyOps& ops : kFamilies) {
    if (ops.family == family) return &ops;
  }
  return unimplemented(std::string("the ") + models::family_name(family) +
                       " family is recognised but not served by this build");
}

int visible_gpus() {
#if MMSERVE_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it: the executors' own checks report a missing device with the reason
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

Status check_servable(models::Family family) {
  return find_family(family).status();
}

Status check_known_keys(const nlohmann::json& config, const std::vector<std::string>& known,
                        const std::string& family) {
  if (config.is_null()) return ok_status();
  if (!config.is_object()) return invalid_argument("mmserve.yaml: options must be a mapping");
  for (const auto& [key, value] : config.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return invalid_argument(
          "mmserve.yaml: '" + key + "' does not apply to " + family + " models" +
          (list.empty() ? std::string(" (they take no family options)") : " (they take: " + list + ")"));
    }
  }
  return ok_status();
}

}  // namespace mmserve::engine
