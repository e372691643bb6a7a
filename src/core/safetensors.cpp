// safetensors reading and writing, and the HF checkpoint directory (single file or index + shards).
//
// A safetensors file is outside input, so parse() trusts nothing: the 8-byte header length, the JSON, every
// entry's dtype/shape/offsets and the byte ranges are all checked before a TensorInfo is handed out, and each
// failure is a Status naming the file (label) and the tensor. nlohmann::json exceptions are caught here and
// nowhere else. Files are mmap'd read-only and private, so the views are zero-copy; if another process
// truncates a mapped file the kernel raises SIGBUS, which no parser can prevent (weights are immutable in
// deployment). Tests: tests/unit/core/safetensors_test.cpp (hand-built good and broken files, shards);
// fuzz: fuzz/safetensors_fuzz.cpp.
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_config.h"

namespace mmserve {
namespace {

using nlohmann::json;

// The reference implementation's limit too: a header this large is an attack, not a checkpoint.
constexpr uint64_t kHeaderBytesMax = 100ull * 1000 * 1000;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";

std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads a JSON unsigned integer that fits in int64 (shape dims and offsets must); nullopt for anything
// else (negative, fractional, out of range, not a number), so the caller can name the offending field.
std::optional<int64_t> as_nonneg_int64(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t u = v.get<uint64_t>();
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(u);
}

// Validates one header entry (everything that does not depend on the other tensors).
Status parse_entry(const std::string& label, const std::string& name, const json& entry, uint64_t data_size,
                   const uint8_t* data_section, TensorInfo* info, uint64_t* begin_out) {
  const std::string where = label + ": tensor " + in_quotes(name);
  if (!entry.is_object()) return invalid_argument(where + ": entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) return invalid_argument(where + ": missing \"" + key + "\"");
  }
  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) return invalid_argument(where + ": \"dtype\" is not a string");
  const auto parsed_dtype = dtype_from_safetensors(dtype.get_ref<const std::string&>());
  if (!parsed_dtype) {
    return unimplemented(where + ": unsupported dtype " + in_quotes(dtype.get_ref<const std::string&>()));
  }

  const json& shape = entry["shape"];
  if (!shape.is_array()) return invalid_argument(where + ": \"shape\" is not an array");
  // Tensor views hold at most kMaxDims dimensions; refusing here keeps view() from aborting later.
  if (shape.size() > static_cast<size_t>(Tensor::kMaxDims)) {
    return unimplemented(where + ": " + std::to_string(shape.size()) + " dimensions (at most " +
                         std::to_string(Tensor::kMaxDims) + " supported)");
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const auto dim = as_nonneg_int64(shape[i]);
    if (!dim) {
      return invalid_argument(where + ": shape[" + std::to_string(i) + "] = " + shape[i].dump() +
                              " is not a non-negative integer");
    }
    info->shape.push_back(*dim);
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(*dim), &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*parsed_dtype)), &nbytes);
  overflow |= numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (overflow) return invalid_argument(where + ": shape " + shape.dump() + " overflows the byte count");

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    return invalid_argument(where + ": \"data_offsets\" is not an array of two integers");
  }
  const auto begin = as_nonneg_int64(offsets[0]);
  const auto end = as_nonneg_int64(offsets[1]);
  if (!begin || !end) {
    return invalid_argument(where + ": \"data_offsets\" " + offsets.dump() + " are not non-negative integers");
  }
  if (*begin > *end) return invalid_argument(where + ": data_offsets " + offsets.dump() + " begin > end");
  if (static_cast<uint64_t>(*end) > data_size) {
    return out_of_range(where + ": data ends at byte " + std::to_string(*end) + " but the data section has " +
                        std::to_string(data_size) + " bytes (file truncated?)");
  }
  const uint64_t range = static_cast<uint64_t>(*end - *begin);
  if (range != nbytes) {
    return invalid_argument(where + ": shape " + shape.dump() + " of " + dtype.get<std::string>() + " needs " +
                            std::to_string(nbytes) + " bytes but data_offsets " + offsets.dump() + " hold " +
                            std::to_string(range));
  }
  info->name = name;
  info->dtype = *parsed_dtype;
  info->nbytes = static_cast<size_t>(nbytes);
  info->data = data_section + *begin;
  *begin_out = static_cast<uint64_t>(*begin);
  return ok_status();
}

Status parse_metadata(const std::string& label, const json& meta, std::map<std::string, std::string>* out) {
  if (!meta.is_object()) return invalid_argument(label + ": \"__metadata__\" is not an object");
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) {
      return invalid_argument(label + ": \"__metadata__\"." + key + " is not a string (got " + value.dump() + ")");
    }
    (*out)[key] = value.get<std::string>();
  }
  return ok_status();
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: checked when the header was parsed
  return n;
}

Tensor TensorInfo::view() const {
  // The mapping is PROT_READ: writing through this view faults. Tensor has no const flavour, hence the cast.
  return Tensor(const_cast<uint8_t*>(data), dtype, shape, Device::cpu());
}

Status SafetensorsFile::parse(const uint8_t* data, size_t size) {
  const std::string& label = path_;
  if (size < 8) {
    return out_of_range(label + ": file is " + std::to_string(size) +
                        " bytes, shorter than the 8-byte header length (truncated?)");
  }
  const uint64_t header_size = read_u64_le(data);
  if (header_size > kHeaderBytesMax) {
    return resource_exhausted(label + ": header length " + std::to_string(header_size) + " exceeds the " +
                              std::to_string(kHeaderBytesMax) + "-byte limit");
  }
  if (header_size > size - 8) {
    return out_of_range(label + ": header length " + std::to_string(header_size) + " but only " +
                        std::to_string(size - 8) + " bytes follow (file truncated?)");
  }
  const uint8_t* header = data + 8;
  const uint8_t* data_section = header + header_size;
  const uint64_t data_size = size - 8 - header_size;
  // nlohmann's lexer reads a NUL byte as end of input, so "{...}\0<junk>" would parse; valid JSON can
  // never contain a raw NUL (control characters in strings must be escaped), so refuse it up front.
  if (const void* nul = std::memchr(header, 0, header_size); nul != nullptr) {
    return invalid_argument(label + ": header JSON syntax error: NUL byte at header offset " +
                            std::to_string(static_cast<const uint8_t*>(nul) - header));
  }

  // Duplicate top-level keys would otherwise be silently collapsed by nlohmann (last one wins), hiding
  // which byte range a tensor really uses; the callback sees every key of the root object at depth 1.
  std::set<std::string> seen;
  std::string duplicate;
  const json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(header, header + header_size, on_event, /*allow_exceptions=*/true);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const size_t detail = what.find("syntax error");
    return invalid_argument(
        label + ": header JSON syntax error at " +
        json_error_position(std::string_view(reinterpret_cast<const char*>(header), header_size), e.byte) + ": " +
        (detail == std::string::npos ? what : what.substr(detail)));
  } catch (const json::exception& e) {  // e.g. out_of_range.406: a number literal that overflows a double
    return invalid_argument(label + ": header JSON: " + e.what());
  }
  if (!root.is_object()) return invalid_argument(label + ": header is not a JSON object");
  if (!duplicate.empty()) return invalid_argument(label + ": tensor " + in_quotes(duplicate) + " appears twice");

  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      RETURN_IF_ERROR(parse_metadata(label, entry, &metadata_));
      continue;
    }
    TensorInfo info;
    uint64_t begin = 0;
    RETURN_IF_ERROR(parse_entry(label, name, entry, data_size, data_section, &info, &begin));
    // Names are unique here (duplicates were refused above), so emplace always inserts.
    auto it = tensors_.emplace(name, std::move(info)).first;
    if (it->second.nbytes > 0) ranges.push_back({begin, begin + it->second.nbytes, &it->first});
  }
  // Empty ranges cannot alias anything, so only non-empty ones are compared (sorted by start).
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return invalid_argument(label + ": tensors " + in_quotes(*ranges[i - 1].name) + " and " +
                              in_quotes(*ranges[i].name) + " overlap (bytes [" + std::to_string(ranges[i].begin) +
                              ", " + std::to_string(std::min(ranges[i].end, ranges[i - 1].end)) +
                              ") of the data section)");
    }
  }
  return ok_status();
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_buffer(const uint8_t* data, size_t size,
                                                                        const std::string& label) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = label;
  try {
    RETURN_IF_ERROR(file->parse(data, size));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(label + ": out of memory while parsing the header");
  }
  return file;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string message = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT || err == ENOTDIR ? not_found(message) : failed_precondition(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return failed_precondition(path + ": fstat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  const size_t size = static_cast<size_t>(st.st_size);
  // mmap of length 0 is EINVAL; an empty file falls through to parse(), which reports it as too short.
  if (size > 0) {
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return resource_exhausted(path + ": mmap of " + std::to_string(size) + " bytes: " + std::strerror(err));
    }
    file->mapping_ = mapping;
    file->mapping_size_ = size;
  }
  ::close(fd);  // the mapping keeps the file alive
  try {
    RETURN_IF_ERROR(file->parse(static_cast<const uint8_t*>(file->mapping_), size));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(path + ": out of memory while parsing the header");
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = path + ": tensor " + in_quotes(t.name);
    if (t.name == kMetadataKey) return invalid_argument(where + ": the name is reserved");
    if (header.contains(t.name)) return invalid_argument(where + ": appears twice");
    // Packed int4 has no safetensors dtype of its own (it is stored as U8 with a different shape).
    if (t.dtype == DType::kI4Packed) return unimplemented(where + ": packed int4 cannot be written directly");
    if (t.shape.size() > static_cast<size_t>(Tensor::kMaxDims)) return invalid_argument(where + ": too many dims");
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : t.shape) {
      if (d < 0) return invalid_argument(where + ": negative dimension");
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes);
    if (overflow) return invalid_argument(where + ": shape overflows the byte count");
    if (nbytes > 0 && t.data == nullptr) return invalid_argument(where + ": no data");
    header[t.name] = {
        {"dtype", dtype_to_safetensors(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(static_cast<size_t>(nbytes));
    offset += nbytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // type_error.316: a name or value that is not valid UTF-8
    return invalid_argument(path + ": " + e.what());
  }
  // Padding the header to 8 bytes keeps every tensor as aligned as the writer's own offsets (HF does this).
  text.append((8 - text.size() % 8) % 8, ' ');

  // Written beside the target and renamed, so a crash never leaves a half-written checkpoint behind.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return failed_precondition(tmp + ": cannot create: " + std::strerror(errno));
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    ok = sizes[i] == 0 || std::fwrite(tensors[i].data, 1, sizes[i], f) == sizes[i];
  }
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {  // buffered data is flushed here, so a full disk may only show now
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return failed_precondition(tmp + ": write failed: " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return failed_precondition(path + ": rename from " + tmp + ": " + std::strerror(err));
  }
  return ok_status();
}

StatusOr<std::unique_ptr<WeightStore>> WeightStore::open_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  auto store = std::make_unique<WeightStore>();
  const fs::path index_path = fs::path(dir) / kIndexFile;
  const fs::path single_path = fs::path(dir) / kSingleFile;
  std::error_code ec;

  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return not_found(dir + ": neither " + kIndexFile + " nor " + kSingleFile + " exists");
    }
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(single_path.string()));
    for (const auto& [name, info] : file->tensors()) store->index_[name] = &info;
    store->files_.push_back(std::move(file));
    return store;
  }

  const std::string index_label = index_path.string();
  ASSIGN_OR_RETURN(nlohmann::json index, read_json_file(index_label));
  const auto weight_map_it = index.find("weight_map");  // end() for a non-object too
  if (weight_map_it == index.end() || !weight_map_it->is_object()) {
    return invalid_argument(index_label + ": missing \"weight_map\" object");
  }
  const json& weight_map = *weight_map_it;
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map.items()) {
    if (!shard.is_string()) {
      return invalid_argument(index_label + ": weight_map." + tensor + " is not a string");
    }
    const std::string& shard_name = shard.get_ref<const std::string&>();
    // Shards must sit beside the index: a name that could climb out of the directory is refused.
    if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name.find("..") != std::string::npos) {
      return invalid_argument(index_label + ": weight_map." + tensor + ": shard name " + in_quotes(shard_name) +
                              " is not a plain file name");
    }
    shard_names.insert(shard_name);
  }

  std::map<std::string, const SafetensorsFile*> by_shard;
  for (const std::string& shard_name : shard_names) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::open((fs::path(dir) / shard_name).string()));
    by_shard[shard_name] = file.get();
    store->files_.push_back(std::move(file));
  }
  std::map<std::string, const std::string*> owner;  // tensor -> path of the shard holding it
  for (const auto& file : store->files_) {
    for (const auto& [name, info] : file->tensors()) {
      auto [it, inserted] = owner.emplace(name, &file->path());
      if (!inserted) {
        return invalid_argument(dir + ": tensor " + in_quotes(name) + " is in two shards: " + *it->second + " and " +
                                file->path());
      }
      store->index_[name] = &info;
    }
  }
  for (const auto& [tensor, shard] : weight_map.items()) {
    const SafetensorsFile* file = by_shard.at(shard.get<std::string>());
    if (file->find(tensor) == nullptr) {
      return not_found(index_label + ": tensor " + in_quotes(tensor) + " is mapped to " + file->path() +
                       ", which does not contain it");
    }
  }
  return store;
}

const TensorInfo* WeightStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, info] : index_) out.push_back(name);
  return out;
}

size_t WeightStore::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, info] : index_) total += info->nbytes;
  return total;
}

}  // namespace mmserve
