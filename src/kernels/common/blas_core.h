// Making sure OpenBLAS runs its fast kernels on CPUs it does not recognise.
//
// OpenBLAS picks its kernel set (its "core") once, when the library is loaded, from the CPU model. Debian 12's
// OpenBLAS 0.3.21 does not know Sapphire Rapids and newer Xeons and falls back to pre-AVX kernels: measured
// 27 GFLOP/s instead of 114-172 on 2 cores of the GPU host. The only cure is the OPENBLAS_CORETYPE variable,
// read at load time, so the entry points (mmserve, benchmarks) call reexec_with_blas_coretype_if_needed()
// first thing in main(): when OpenBLAS chose a generic core although the CPU has AVX2 or AVX-512, it sets
// OPENBLAS_CORETYPE and re-executes the same binary with the same arguments. A user-set OPENBLAS_CORETYPE is
// always respected. Tests: common/blas_core_test.cpp (in kernels_test).
#pragma once

#include <string>

namespace mmserve::kernels {

// The kernel set OpenBLAS chose ("Haswell", "SkylakeX", "Prescott", ...).
std::string blas_core_name();
// The OPENBLAS_CORETYPE this CPU should use given the chosen core, or "" when the choice is fine.
// Pure function of its inputs (tested directly): a pre-AVX2 core on an AVX-512 CPU -> "SkylakeX", on an AVX2
// CPU -> "Haswell".
std::string blas_coretype_fix(const std::string& chosen_core, bool cpu_has_avx2, bool cpu_has_avx512);
// Re-executes the process (execv /proc/self/exe) with OPENBLAS_CORETYPE set when needed; returns only when no
// re-exec was needed or it failed (then the process continues on the slow kernels, with a warning).
void reexec_with_blas_coretype_if_needed(char** argv);

}  // namespace mmserve::kernels
