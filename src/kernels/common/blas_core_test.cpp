// blas_core: which OPENBLAS_CORETYPE is forced for which detected core and CPU.
#include "kernels/common/blas_core.h"

#include <gtest/gtest.h>

namespace mmserve::kernels {
namespace {

TEST(BlasCore, GenericCoreOnModernCpuIsFixed) {
  EXPECT_EQ(blas_coretype_fix("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(blas_coretype_fix("Sandybridge", true, false), "Haswell");
  EXPECT_EQ(blas_coretype_fix("Nehalem", false, false), "");  // an old CPU: the generic core is right
}

TEST(BlasCore, RecognisedCoresAreLeftAlone) {
  EXPECT_EQ(blas_coretype_fix("Haswell", true, false), "");
  EXPECT_EQ(blas_coretype_fix("SkylakeX", true, true), "");
  EXPECT_EQ(blas_coretype_fix("Zen", true, false), "");
  EXPECT_EQ(blas_coretype_fix("Cooperlake", true, true), "");
}

TEST(BlasCore, ReportsTheLinkedLibrarysChoice) {
  EXPECT_FALSE(blas_core_name().empty());
}

}  // namespace
}  // namespace mmserve::kernels
