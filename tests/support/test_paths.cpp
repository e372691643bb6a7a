#include "test_paths.h"

#include <cstdlib>

namespace mmserve::test {

const std::string& source_dir() {
  static const std::string dir = [] {
    const char* env = std::getenv("MMSERVE_SOURCE_DIR");
    return std::string(env != nullptr && *env != '\0' ? env : MMSERVE_COMPILED_SOURCE_DIR);
  }();
  return dir;
}

const std::string& fixtures_dir() {
  static const std::string dir = source_dir() + "/tests/fixtures";
  return dir;
}

}  // namespace mmserve::test
