// libFuzzer target for the safetensors header parser (SafetensorsFile::from_buffer).
//
// Whatever the bytes, parsing must return a Status or a file whose every TensorInfo lies inside the
// buffer: on success each tensor's bytes are read (ASan flags any range the validator let through that
// leaves the buffer) and checked against the shape, and each view() is built (it aborts on a shape a
// Tensor cannot hold). Seeds: fuzz/corpus/safetensors_fuzz/. Run: scripts/run-fuzzers.sh build/fuzz/fuzz 60.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = mmserve::SafetensorsFile::from_buffer(data, size, "fuzz");
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, info] : (*file)->tensors()) {
    if (info.nbytes != static_cast<size_t>(info.numel()) * mmserve::dtype_size(info.dtype)) std::abort();
    if (info.nbytes > 0 && (info.data < data || info.data + info.nbytes > data + size)) std::abort();
    for (size_t i = 0; i < info.nbytes; ++i) sink = sink ^ info.data[i];
    mmserve::Tensor view = info.view();
    if (view.nbytes() != info.nbytes) std::abort();
  }
  (void)sink;
  return 0;
}
