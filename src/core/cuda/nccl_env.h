// NCCL's environment for this process and every child it starts (issue 6 item 5, SPEC 2.2).
//
// The document's settings are defaults a user's environment overrides: NCCL_ASYNC_ERROR_HANDLING=1 (a failing
// communicator is reported instead of hanging the process) and NCCL_SHARP_DISABLE=1. NCCL_NVLS_ENABLE=0 is forced
// even when the user set something else: NVLink SHARP / multicast (NVLS, cuMulticastCreate) can take the shared
// GPU hosts this project runs on out of service, so nothing here may turn it on (and nothing calls
// cuMulticastCreate). setenv() before any thread or NCCL communicator exists, so NCCL and children see it.
// Needs no CUDA: it only edits the environment. Tests: tests/unit/core/nccl_env_test.cpp.
#pragma once

#include <string>
#include <vector>

namespace mmserve {

struct NcclEnvSetting {
  std::string name;
  std::string value;  // what the variable is after apply_nccl_environment()
  enum class Source { kDefault, kUser, kForced } source = Source::kDefault;
};

// Applies the settings above; returns one entry per variable (for the start-up log line). Call it first thing
// in `mmserve serve`, before threads start (setenv is not thread-safe against getenv in other threads).
std::vector<NcclEnvSetting> apply_nccl_environment();

// "NCCL_ASYNC_ERROR_HANDLING=1 (default), NCCL_SHARP_DISABLE=0 (user), NCCL_NVLS_ENABLE=0 (forced)".
std::string describe_nccl_environment(const std::vector<NcclEnvSetting>& settings);

}  // namespace mmserve
