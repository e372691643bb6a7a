// safetensors reading: one file (mmap'd, header validated) and whole HF checkpoints (single file or shards
// listed in model.safetensors.index.json).
//
// The header is outside bytes, so every field is validated before any tensor is handed out: JSON syntax,
// header length within the file, dtype known, shape non-negative and consistent with the byte range, byte
// ranges inside the data section and not overlapping. Each failure is a Status naming the file and the
// tensor. Tensor views point into the mapping and live as long as the SafetensorsFile / WeightStore.
// Tests: tests/unit/core/safetensors_test.cpp; fuzz: fuzz/safetensors_fuzz.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mmserve {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
  int64_t numel() const;
  // A CPU view of the stored bytes (read-only in spirit: the mapping is PROT_READ).
  Tensor view() const;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  // Validates an in-memory buffer (the fuzz target and tests use this; `label` names it in errors).
  // The buffer must outlive the returned object.
  static StatusOr<std::unique_ptr<SafetensorsFile>> from_buffer(const uint8_t* data, size_t size,
                                                                const std::string& label);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const TensorInfo* find(const std::string& name) const;  // nullptr if absent
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status parse(const uint8_t* data, size_t size);

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file (used by the demo-model writer and by tests that build broken files).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // storage_bytes(dtype, numel) bytes
};
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// All tensors of an HF model directory: `model.safetensors`, or the shards named by
// `model.safetensors.index.json` (every shard it names must exist, and every tensor must be in the shard
// the index says). A tensor name present in two shards is an error.
class WeightStore {
 public:
  static StatusOr<std::unique_ptr<WeightStore>> open_model_dir(const std::string& dir);
  const TensorInfo* find(const std::string& name) const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  size_t total_bytes() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace mmserve
