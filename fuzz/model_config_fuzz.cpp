// libFuzzer target for a model's mmserve.yaml (serving/model_config.h): parse_model_config on arbitrary text, and
// for an accepted config the replica layout (replica_groups) for 0 to 3 visible GPUs.
//
// Outside bytes reach yaml-cpp (wrapped by model_config.cpp, which must turn every yaml-cpp exception into a
// kInvalidArgument: an exception that escapes is a finding), then the per-key readers and validate_model_config.
// An accepted config must pass validate_model_config again.
// Seeds (fuzz/corpus/model_config_fuzz): the documented keys with their defaults, a GPU layout, a qos config,
// and broken ones (a tab indent, an unknown key, a wrong type, unsorted buckets, a sequence at the top, anchors
// and aliases, deep nesting).
// Run: build/fuzz/fuzz/model_config_fuzz -max_total_time=60 fuzz/corpus/model_config_fuzz (docs/testing.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "serving/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64 << 10)) return 0;  // a config file; keeps each run fast
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = mmserve::serving::parse_model_config(text, "fuzz/mmserve.yaml");
  if (!config.ok()) return 0;
  if (!mmserve::serving::validate_model_config(*config, "fuzz/mmserve.yaml").ok()) std::abort();
  for (int gpus = 0; gpus <= 3; ++gpus) (void)mmserve::serving::replica_groups(*config, gpus, "fuzz/mmserve.yaml");
  return 0;
}
