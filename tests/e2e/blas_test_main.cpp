// main() for the end-to-end tests that compare the served output with an executor run inside the test process:
// it makes the test process pick OpenBLAS's kernels by the same rule as `mmserve` itself
// (kernels/common/blas_core.h re-executes with OPENBLAS_CORETYPE on CPUs Debian's OpenBLAS does not know), so
// both sides round alike and "equals the executor" can be compared exactly. Without it, on such a CPU the
// server ran SkylakeX kernels and the test Prescott ones: no_speech_prob differed in the 7th digit.
#include <gtest/gtest.h>

#include "kernels/common/blas_core.h"

int main(int argc, char** argv) {
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
