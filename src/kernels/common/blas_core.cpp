// OpenBLAS core detection fix-up (see blas_core.h).
#include "kernels/common/blas_core.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

extern "C" char* openblas_get_corename(void);

namespace mmserve::kernels {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string blas_coretype_fix(const std::string& chosen_core, bool cpu_has_avx2, bool cpu_has_avx512) {
  std::string core = chosen_core;
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  // OpenBLAS's x86-64 cores without AVX2 kernels: what it falls back to for CPUs it does not know.
  static const std::set<std::string> kGeneric = {
      "prescott",  "core2",  "penryn",  "dunnington", "nehalem", "atom",        "katmai",  "coppermine",
      "northwood", "banias", "opteron", "barcelona",  "bobcat",  "sandybridge", "unknown", ""};
  if (!kGeneric.count(core)) return "";
  if (cpu_has_avx512) return "SkylakeX";
  if (cpu_has_avx2) return "Haswell";
  return "";
}

void reexec_with_blas_coretype_if_needed(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user (or our earlier self) decided
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const std::string fix = blas_coretype_fix(blas_core_name(), avx2, avx512);
  if (fix.empty()) return;
  setenv("OPENBLAS_CORETYPE", fix.c_str(), 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "mmserve: warning: OpenBLAS chose its generic '%s' kernels and re-executing with "
               "OPENBLAS_CORETYPE=%s failed; set it yourself for full speed\n",
               blas_core_name().c_str(), fix.c_str());
}

}  // namespace mmserve::kernels
