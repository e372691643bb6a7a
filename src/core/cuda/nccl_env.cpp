// NCCL environment defaults and the forced NVLS off switch (see nccl_env.h). Tests: tests/unit/core/nccl_env_test.cpp.
#include "core/cuda/nccl_env.h"

#include <cstdlib>

namespace mmserve {

std::vector<NcclEnvSetting> apply_nccl_environment() {
  std::vector<NcclEnvSetting> out;
  // The document's defaults: setenv without overwrite, so the user's environment wins.
  for (const char* name : {"NCCL_ASYNC_ERROR_HANDLING", "NCCL_SHARP_DISABLE"}) {
    NcclEnvSetting setting;
    setting.name = name;
    if (const char* user = std::getenv(name); user != nullptr) {
      setting.value = user;
      setting.source = NcclEnvSetting::Source::kUser;
    } else {
      ::setenv(name, "1", /*overwrite=*/0);
      setting.value = "1";
      setting.source = NcclEnvSetting::Source::kDefault;
    }
    out.push_back(setting);
  }
  // Always off, whatever the user set: NVLink multicast can put the shared hosts out of service.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  out.push_back({"NCCL_NVLS_ENABLE", "0", NcclEnvSetting::Source::kForced});
  return out;
}

std::string describe_nccl_environment(const std::vector<NcclEnvSetting>& settings) {
  std::string out;
  for (const NcclEnvSetting& s : settings) {
    if (!out.empty()) out += ", ";
    const char* source = s.source == NcclEnvSetting::Source::kUser     ? "user"
                         : s.source == NcclEnvSetting::Source::kForced ? "forced"
                                                                       : "default";
    out += s.name + "=" + s.value + " (" + source + ")";
  }
  return out;
}

}  // namespace mmserve
