// NCCL environment: the document's defaults yield to the user's environment, NCCL_NVLS_ENABLE=0 never does.
#include "core/cuda/nccl_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace mmserve {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "<unset>" : v;
}

TEST(NcclEnv, SetsDefaultsWhenUnsetAndForcesNvlsOff) {
  ::unsetenv("NCCL_ASYNC_ERROR_HANDLING");
  ::unsetenv("NCCL_SHARP_DISABLE");
  ::unsetenv("NCCL_NVLS_ENABLE");
  const std::vector<NcclEnvSetting> settings = apply_nccl_environment();
  EXPECT_EQ(env("NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(env("NCCL_SHARP_DISABLE"), "1");
  EXPECT_EQ(env("NCCL_NVLS_ENABLE"), "0");
  ASSERT_EQ(settings.size(), 3u);
  EXPECT_EQ(describe_nccl_environment(settings),
            "NCCL_ASYNC_ERROR_HANDLING=1 (default), NCCL_SHARP_DISABLE=1 (default), NCCL_NVLS_ENABLE=0 (forced)");
}

TEST(NcclEnv, UserValuesWinExceptNvls) {
  ::setenv("NCCL_ASYNC_ERROR_HANDLING", "0", 1);
  ::setenv("NCCL_SHARP_DISABLE", "0", 1);
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);  // must not survive
  const std::vector<NcclEnvSetting> settings = apply_nccl_environment();
  EXPECT_EQ(env("NCCL_ASYNC_ERROR_HANDLING"), "0");
  EXPECT_EQ(env("NCCL_SHARP_DISABLE"), "0");
  EXPECT_EQ(env("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(describe_nccl_environment(settings),
            "NCCL_ASYNC_ERROR_HANDLING=0 (user), NCCL_SHARP_DISABLE=0 (user), NCCL_NVLS_ENABLE=0 (forced)");
}

TEST(NcclEnv, ChildProcessesInheritIt) {
  ::setenv("NCCL_NVLS_ENABLE", "1", 1);
  apply_nccl_environment();
  // A child started with system() sees the forced value.
  EXPECT_EQ(std::system("test \"$NCCL_NVLS_ENABLE\" = 0"), 0);
}

}  // namespace
}  // namespace mmserve
