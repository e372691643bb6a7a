// The serving layer's YAML files: a model's mmserve.yaml (model_config.h) and the server-wide config
// (server_types.h). This is the one file that wraps yaml-cpp: its exceptions (syntax errors, failed
// conversions) are caught here and become kInvalidArgument naming the file and the key. Every key is
// optional; unknown keys are errors (a typo must not silently fall back to a default). Values are then
// validated (ranges, bucket order) by validate_model_config / validate_server_config, which code that builds
// configs by hand calls too. Tests: tests/unit/serving/model_config_test.cpp.
#include "serving/model_config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "core/tensor.h"
#include "serving/server_types.h"

namespace mmserve::serving {
namespace {

constexpr int kPriorityLevelsMax = 64;  // bounds the {priority} label's cardinality
constexpr int kInstancesMax = 64;
constexpr int kTensorParallelMax = 8;         // the GPUs of one node
constexpr const char* kAllGpus = "cuda:all";  // `device: cuda:all`: one replica per visible GPU

// Where a value sits, for messages: "models/a/mmserve.yaml: key 'qos.image'".
std::string where(const std::string& label, const std::string& key) {
  return label + ": key '" + key + "'";
}

std::string scalar_text(const YAML::Node& node) {
  if (!node.IsScalar()) return node.IsSequence() ? "a list" : node.IsMap() ? "a map" : "null";
  return "'" + node.Scalar() + "'";
}

StatusOr<int64_t> read_int(const YAML::Node& node, const std::string& label, const std::string& key) {
  if (node.IsScalar()) {
    try {
      return node.as<int64_t>();
    } catch (const YAML::Exception&) {
    }
  }
  return invalid_argument(where(label, key) + ": expected an integer, got " + scalar_text(node));
}

StatusOr<double> read_double(const YAML::Node& node, const std::string& label, const std::string& key) {
  if (node.IsScalar()) {
    try {
      const double v = node.as<double>();
      if (std::isfinite(v)) return v;
    } catch (const YAML::Exception&) {
    }
  }
  return invalid_argument(where(label, key) + ": expected a finite number, got " + scalar_text(node));
}

StatusOr<std::string> read_string(const YAML::Node& node, const std::string& label, const std::string& key) {
  if (node.IsScalar()) return node.Scalar();
  return invalid_argument(where(label, key) + ": expected a string, got " + scalar_text(node));
}

// A YAML value as JSON, for the family's `options` (scalars typed as YAML 1.2's core schema reads them: true/false,
// integers, finite numbers, else strings). Nested maps and lists are kept, down to 32 levels: deeper is refused, which
// also stops an alias that refers to its own anchor (yaml-cpp builds that as a cycle; found by model_config_fuzz).
StatusOr<nlohmann::json> yaml_to_json(const YAML::Node& node, const std::string& where_text, int depth = 0) {
  if ((node.IsMap() || node.IsSequence()) && depth >= 32) {
    return invalid_argument(where_text + ": nested more than 32 levels deep (or an alias refers to itself)");
  }
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& entry : node) {
      const std::string key = entry.first.Scalar();
      ASSIGN_OR_RETURN(out[key], yaml_to_json(entry.second, where_text + "." + key, depth + 1));
    }
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : node) {
      ASSIGN_OR_RETURN(nlohmann::json value, yaml_to_json(item, where_text, depth + 1));
      out.push_back(std::move(value));
    }
    return out;
  }
  if (!node.IsScalar()) return nlohmann::json();
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return nlohmann::json(text);  // quoted: a string
  if (text == "true" || text == "false") return nlohmann::json(text == "true");
  try {
    size_t used = 0;
    const long long i = std::stoll(text, &used);
    if (used == text.size()) return nlohmann::json(i);
    const double d = std::stod(text, &used);
    if (used == text.size() && std::isfinite(d)) return nlohmann::json(d);
  } catch (const std::exception&) {
  }
  return nlohmann::json(text);
}

template <typename T, typename Read>
StatusOr<std::vector<T>> read_list(const YAML::Node& node, const std::string& label, const std::string& key,
                                   Read read) {
  if (!node.IsSequence()) return invalid_argument(where(label, key) + ": expected a list, got " + scalar_text(node));
  std::vector<T> out;
  for (size_t i = 0; i < node.size(); ++i) {
    ASSIGN_OR_RETURN(auto v, read(node[i], label, key + "[" + std::to_string(i) + "]"));
    out.push_back(static_cast<T>(v));
  }
  return out;
}

StatusOr<int> read_int32(const YAML::Node& node, const std::string& label, const std::string& key) {
  ASSIGN_OR_RETURN(int64_t v, read_int(node, label, key));
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    return invalid_argument(where(label, key) + ": " + std::to_string(v) + " is out of range");
  }
  return static_cast<int>(v);
}

// Parses the text into a map node (an empty document is an empty map).
StatusOr<YAML::Node> load_map(const std::string& text, const std::string& label) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return invalid_argument(label + ": invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  if (root.IsNull()) return YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return invalid_argument(label + ": expected a map of settings at the top level");
  return root;
}

// Calls the handler registered for each key; an unregistered key is an error listing the known ones.
using KeyHandler = std::function<Status(const YAML::Node&, const std::string& key)>;
Status for_each_key(const YAML::Node& map, const std::string& label, const std::string& prefix,
                    const std::map<std::string, KeyHandler>& handlers) {
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) return invalid_argument(label + ": a key that is not a string");
    const std::string key = kv.first.Scalar();
    auto it = handlers.find(key);
    if (it == handlers.end()) {
      std::string message = label;
      message.append(": unknown key '").append(prefix).append(key).append("' (known:");
      for (const auto& [name, _] : handlers) message.append(" ").append(name);
      return invalid_argument(message.append(")"));
    }
    RETURN_IF_ERROR(it->second(kv.second, prefix + key));
  }
  return ok_status();
}

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return not_found("cannot read " + path);
  return text.str();
}

// Powers of two below max_batch_size, then max_batch_size itself.
std::vector<int> default_buckets(int max_batch_size) {
  std::vector<int> out;
  for (int b = 1; b < max_batch_size; b *= 2) out.push_back(b);
  out.push_back(max_batch_size);
  return out;
}

Status out_of_range_value(const std::string& label, const std::string& key, const std::string& value,
                          const std::string& rule) {
  return invalid_argument(where(label, key) + ": " + value + " " + rule);
}

}  // namespace

Status validate_model_config(const ModelConfig& c, const std::string& label) {
  if (c.device != kAllGpus) {
    auto device = parse_device(c.device);
    if (!device.ok()) return invalid_argument(where(label, "device") + ": " + device.status().message());
  }
  if (!c.devices.empty() && c.device != "cpu") {
    // parse_model_config refuses both keys given; this catches configs built in code.
    return invalid_argument(label + ": keys 'device' and 'devices' are exclusive (device is '" + c.device + "')");
  }
  if (c.devices.size() > static_cast<size_t>(kInstancesMax)) {
    return out_of_range_value(label, "devices", std::to_string(c.devices.size()) + " entries",
                              "must be at most " + std::to_string(kInstancesMax));
  }
  for (size_t i = 0; i < c.devices.size(); ++i) {
    auto device = parse_device(c.devices[i]);
    if (!device.ok()) {
      return invalid_argument(where(label, "devices[" + std::to_string(i) + "]") + ": " + device.status().message() +
                              (c.devices[i] == kAllGpus ? "; cuda:all goes in 'device', not in a list" : ""));
    }
  }
  if (c.tensor_parallel < 1 || c.tensor_parallel > kTensorParallelMax) {
    return out_of_range_value(label, "tensor_parallel", std::to_string(c.tensor_parallel),
                              "must be in 1.." + std::to_string(kTensorParallelMax));
  }
  if (c.pipeline_parallel != 1 && c.pipeline_parallel != 2) {
    return out_of_range_value(label, "pipeline_parallel", std::to_string(c.pipeline_parallel), "must be 1 or 2");
  }
  if (c.pipeline_parallel > 1 && c.tensor_parallel > 1) {
    return invalid_argument(where(label, "pipeline_parallel") + ": cannot be combined with tensor_parallel (yet)");
  }
  if (c.vision_micro_batch < 1 || c.vision_micro_batch > 4096) {
    return out_of_range_value(label, "vision_micro_batch", std::to_string(c.vision_micro_batch), "must be in 1..4096");
  }
  if (c.text_micro_batch < 1 || c.text_micro_batch > 4096) {
    return out_of_range_value(label, "text_micro_batch", std::to_string(c.text_micro_batch), "must be in 1..4096");
  }
  const int group = c.tensor_parallel * c.pipeline_parallel;
  if (c.instances != 0 && static_cast<size_t>(c.instances) * group < c.devices.size()) {
    return out_of_range_value(label, "instances", std::to_string(c.instances),
                              "is below the " + std::to_string(c.devices.size()) + " entries of 'devices'" +
                                  (group > 1 ? " in groups of " + std::to_string(group) : "") +
                                  " (a listed device would get no replica)");
  }
  if (c.dtype != "auto" && c.dtype != "f32" && c.dtype != "f16" && c.dtype != "bf16") {
    return invalid_argument(where(label, "dtype") + ": '" + c.dtype + "' is not one of auto, f32, f16, bf16");
  }
  if (c.decoder_rows != 0 && (c.decoder_rows < 5 || c.decoder_rows > 4096)) {
    return out_of_range_value(label, "decoder_rows", std::to_string(c.decoder_rows),
                              "must be 0 (the device's) or in 5..4096 (5: the default best_of)");
  }
  if (c.tp_collective != "nccl" && c.tp_collective != "staged") {
    return invalid_argument(where(label, "tp_collective") + ": '" + c.tp_collective + "' is not one of nccl, staged");
  }
  if (c.cross_kv != "same" && c.cross_kv != "fp8_e4m3" && c.cross_kv != "int8") {
    return invalid_argument(where(label, "cross_kv") + ": '" + c.cross_kv + "' is not one of same, fp8_e4m3, int8");
  }
  if (c.instances < 0 || c.instances > kInstancesMax) {
    return out_of_range_value(label, "instances", std::to_string(c.instances),
                              "must be in 0.." + std::to_string(kInstancesMax) + " (0 = one per device)");
  }
  if (c.max_batch_size < 1) {
    return out_of_range_value(label, "max_batch_size", std::to_string(c.max_batch_size), "must be >= 1");
  }
  if (c.batch_buckets.empty()) return invalid_argument(where(label, "batch_buckets") + ": must not be empty");
  for (size_t i = 0; i < c.batch_buckets.size(); ++i) {
    if (c.batch_buckets[i] < 1) {
      return out_of_range_value(label, "batch_buckets", std::to_string(c.batch_buckets[i]), "must be positive");
    }
    if (i > 0 && c.batch_buckets[i] <= c.batch_buckets[i - 1]) {
      return invalid_argument(where(label, "batch_buckets") + ": must be strictly increasing (" +
                              std::to_string(c.batch_buckets[i - 1]) + " then " + std::to_string(c.batch_buckets[i]) +
                              ")");
    }
  }
  if (c.batch_buckets.back() < c.max_batch_size) {
    return invalid_argument(where(label, "batch_buckets") + ": the largest bucket (" +
                            std::to_string(c.batch_buckets.back()) + ") is below max_batch_size (" +
                            std::to_string(c.max_batch_size) + "), so a full batch would have no bucket");
  }
  if (!(c.max_queue_delay_ms >= 0) || !std::isfinite(c.max_queue_delay_ms)) {
    return out_of_range_value(label, "max_queue_delay_ms", std::to_string(c.max_queue_delay_ms), "must be >= 0");
  }
  if (c.queue_size < 1) return out_of_range_value(label, "queue_size", std::to_string(c.queue_size), "must be >= 1");
  if (!(c.preempt_chunk_ms >= 0)) {
    return out_of_range_value(label, "preempt_chunk_ms", std::to_string(c.preempt_chunk_ms), "must be >= 0");
  }
  if (c.priority_levels < 1 || c.priority_levels > kPriorityLevelsMax) {
    return out_of_range_value(label, "priority_levels", std::to_string(c.priority_levels),
                              "must be in 1.." + std::to_string(kPriorityLevelsMax));
  }
  if (c.default_priority < 1 || c.default_priority > c.priority_levels) {
    return out_of_range_value(label, "default_priority", std::to_string(c.default_priority),
                              "must be in 1..priority_levels (" + std::to_string(c.priority_levels) + ")");
  }
  if (!(c.default_timeout_ms >= 0) || !std::isfinite(c.default_timeout_ms)) {
    return out_of_range_value(label, "default_timeout_ms", std::to_string(c.default_timeout_ms), "must be >= 0");
  }
  if (c.memory_quota_mb < 0) {
    return out_of_range_value(label, "memory_quota_mb", std::to_string(c.memory_quota_mb), "must be >= 0");
  }
  if (c.threads < 0) return out_of_range_value(label, "threads", std::to_string(c.threads), "must be >= 0");
  if (!(c.audio_seconds_max > 0) || !std::isfinite(c.audio_seconds_max)) {
    return out_of_range_value(label, "audio_seconds_max", std::to_string(c.audio_seconds_max), "must be > 0");
  }
  if (c.audio_bytes_max < 1) {
    return out_of_range_value(label, "audio_bytes_max", std::to_string(c.audio_bytes_max), "must be >= 1");
  }
  return ok_status();
}

StatusOr<ModelConfig> parse_model_config(const std::string& yaml_text, const std::string& label) {
  ASSIGN_OR_RETURN(YAML::Node root, load_map(yaml_text, label));
  ModelConfig c;
  bool buckets_given = false;
  bool device_given = false, devices_given = false;
  auto set_int = [&](int* field) {
    return [&label, field](const YAML::Node& n, const std::string& key) -> Status {
      ASSIGN_OR_RETURN(*field, read_int32(n, label, key));
      return ok_status();
    };
  };
  auto set_double = [&](double* field) {
    return [&label, field](const YAML::Node& n, const std::string& key) -> Status {
      ASSIGN_OR_RETURN(*field, read_double(n, label, key));
      return ok_status();
    };
  };
  auto set_string = [&](std::string* field) {
    return [&label, field](const YAML::Node& n, const std::string& key) -> Status {
      ASSIGN_OR_RETURN(*field, read_string(n, label, key));
      return ok_status();
    };
  };
  const std::map<std::string, KeyHandler> handlers = {
      {"device",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.device, read_string(n, label, key));
         device_given = true;
         return ok_status();
       }},
      {"devices",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.devices, read_list<std::string>(n, label, key, read_string));
         if (c.devices.empty()) return invalid_argument(where(label, key) + ": must list at least one device");
         devices_given = true;
         return ok_status();
       }},
      {"dtype", set_string(&c.dtype)},
      {"cross_kv", set_string(&c.cross_kv)},
      {"decoder_rows", set_int(&c.decoder_rows)},
      {"instances", set_int(&c.instances)},
      {"tensor_parallel", set_int(&c.tensor_parallel)},
      {"tp_collective", set_string(&c.tp_collective)},
      {"pipeline_parallel", set_int(&c.pipeline_parallel)},
      {"vision_micro_batch", set_int(&c.vision_micro_batch)},
      {"text_micro_batch", set_int(&c.text_micro_batch)},
      {"max_batch_size", set_int(&c.max_batch_size)},
      {"batch_buckets",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.batch_buckets, read_list<int>(n, label, key, read_int32));
         buckets_given = true;
         return ok_status();
       }},
      {"max_queue_delay_ms", set_double(&c.max_queue_delay_ms)},
      {"queue_size", set_int(&c.queue_size)},
      {"priority_levels", set_int(&c.priority_levels)},
      {"default_priority", set_int(&c.default_priority)},
      {"default_timeout_ms", set_double(&c.default_timeout_ms)},
      {"memory_quota_mb",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.memory_quota_mb, read_int(n, label, key));
         return ok_status();
       }},
      {"threads", set_int(&c.threads)},
      {"preempt_chunk_ms", set_double(&c.preempt_chunk_ms)},
      {"options",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         if (!n.IsMap()) return invalid_argument(where(label, key) + ": must be a mapping of the family's keys");
         ASSIGN_OR_RETURN(nlohmann::json options, yaml_to_json(n, where(label, key)));
         for (auto& [k, v] : options.items()) c.family_options[k] = v;
         return ok_status();
       }},
      // LoRA (issue 16): the top-level names, handed to the family as its options (engine/llama_executor.h).
      {"adapters",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         if (!n.IsMap()) return invalid_argument(where(label, key) + ": must map adapter names to directories");
         ASSIGN_OR_RETURN(c.family_options["adapters"], yaml_to_json(n, where(label, key)));
         return ok_status();
       }},
      {"gate",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.family_options["gate"], yaml_to_json(n, where(label, key)));
         return ok_status();
       }},
      {"adapter_routing",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.family_options["adapter_routing"], yaml_to_json(n, where(label, key)));
         return ok_status();
       }},
      {"audio_seconds_max", set_double(&c.audio_seconds_max)},
      {"audio_bytes_max",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.audio_bytes_max, read_int(n, label, key));
         return ok_status();
       }},
  };
  RETURN_IF_ERROR(for_each_key(root, label, "", handlers));
  // The flat family keys go to the family too (it refuses those that are not its own).
  for (const char* key : {"cross_kv", "decoder_rows", "vision_micro_batch", "text_micro_batch"}) {
    if (!root[key]) continue;
    if (std::string(key) == "cross_kv") c.family_options[key] = c.cross_kv;
    if (std::string(key) == "decoder_rows") c.family_options[key] = c.decoder_rows;
    if (std::string(key) == "vision_micro_batch") c.family_options[key] = c.vision_micro_batch;
    if (std::string(key) == "text_micro_batch") c.family_options[key] = c.text_micro_batch;
  }
  if (device_given && devices_given) {
    return invalid_argument(label + ": keys 'device' and 'devices' are exclusive (give one device, or the list)");
  }
  // A max_batch_size without buckets gets buckets that reach it (the defaults stop at 64).
  if (!buckets_given && c.max_batch_size >= 1) c.batch_buckets = default_buckets(c.max_batch_size);
  RETURN_IF_ERROR(validate_model_config(c, label));
  return c;
}

StatusOr<std::vector<Device>> replica_devices(const ModelConfig& c, int visible_gpus, const std::string& label) {
  RETURN_IF_ERROR(validate_model_config(c, label));
  std::vector<Device> listed;
  std::string what = "'devices'";
  if (!c.devices.empty()) {
    for (const std::string& text : c.devices) {
      ASSIGN_OR_RETURN(Device device, parse_device(text));
      listed.push_back(device);
    }
  } else if (c.device == kAllGpus) {
    if (visible_gpus < 1) {
      return Status(StatusCode::kUnavailable, where(label, "device") + ": cuda:all but no CUDA device is visible");
    }
    for (int i = 0; i < visible_gpus; ++i) listed.push_back(Device::cuda(i));
    what = "visible GPUs of 'device: cuda:all'";
  } else {
    ASSIGN_OR_RETURN(Device device, parse_device(c.device));
    listed.push_back(device);
  }
  const size_t count = c.instances == 0 ? listed.size() : static_cast<size_t>(c.instances);
  if (count < listed.size()) {
    return out_of_range_value(
        label, "instances", std::to_string(c.instances),
        "is below the " + std::to_string(listed.size()) + " " + what + " (a device would get no replica)");
  }
  std::vector<Device> out;
  for (size_t i = 0; i < count; ++i) out.push_back(listed[i % listed.size()]);
  return out;
}

StatusOr<std::vector<std::vector<Device>>> replica_groups(const ModelConfig& c, int visible_gpus,
                                                          const std::string& label) {
  std::vector<std::vector<Device>> groups;
  const int group_size = c.tensor_parallel * c.pipeline_parallel;
  const std::string key = c.pipeline_parallel > 1 ? "pipeline_parallel" : "tensor_parallel";
  if (group_size == 1) {
    ASSIGN_OR_RETURN(std::vector<Device> devices, replica_devices(c, visible_gpus, label));
    for (const Device& d : devices) groups.push_back({d});
    return groups;
  }
  ModelConfig listing = c;
  listing.instances = 0;  // one entry per listed device
  ASSIGN_OR_RETURN(std::vector<Device> listed, replica_devices(listing, visible_gpus, label));
  const size_t tp = static_cast<size_t>(group_size);
  if (listed.size() % tp != 0) {
    return invalid_argument(where(label, key) + ": " + std::to_string(tp) + " GPUs per replica but " +
                            std::to_string(listed.size()) + " device(s) listed (list them in 'devices', or use " +
                            "device: cuda:all, in groups of " + std::to_string(tp) + ")");
  }
  for (size_t first = 0; first < listed.size(); first += tp) {
    std::vector<Device> group(listed.begin() + static_cast<std::ptrdiff_t>(first),
                              listed.begin() + static_cast<std::ptrdiff_t>(first + tp));
    for (size_t i = 0; i < group.size(); ++i) {
      if (group[i].is_cpu()) {
        return invalid_argument(where(label, key) + ": a GPU group runs on GPUs, not on the CPU");
      }
      for (size_t j = 0; j < i && c.tp_collective != "staged"; ++j) {
        if (group[j].index == group[i].index) {
          return invalid_argument(where(label, key) + ": the group " + std::to_string(first / tp) + " holds " +
                                  group[i].to_string() + " twice (one rank per GPU; tp_collective: staged " +
                                  "lets ranks share a GPU, to check a sharded configuration on one GPU)");
        }
      }
    }
    groups.push_back(std::move(group));
  }
  const size_t count = c.instances == 0 ? groups.size() : static_cast<size_t>(c.instances);
  std::vector<std::vector<Device>> out;
  for (size_t i = 0; i < count; ++i) out.push_back(groups[i % groups.size()]);
  return out;
}

StatusOr<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "mmserve.yaml").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    ModelConfig defaults;
    RETURN_IF_ERROR(validate_model_config(defaults, path));
    return defaults;
  }
  ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_model_config(text, path);
}

Status validate_server_config(const ServerConfig& c, const std::string& label) {
  if (!(c.aging_ms_per_level >= 0) || !std::isfinite(c.aging_ms_per_level)) {
    return out_of_range_value(label, "aging_ms_per_level", std::to_string(c.aging_ms_per_level),
                              "must be >= 0 (0 = no aging)");
  }
  if (c.preprocess_threads < 0 || c.preprocess_threads > 1024) {
    return out_of_range_value(label, "preprocess_threads", std::to_string(c.preprocess_threads), "must be in 0..1024");
  }
  if (c.background_nice < 0 || c.background_nice > 19) {
    return out_of_range_value(label, "background_nice", std::to_string(c.background_nice), "must be in 0..19");
  }
  if (c.preprocess_queue < 1) {
    return out_of_range_value(label, "preprocess_queue", std::to_string(c.preprocess_queue), "must be >= 1");
  }
  if (c.max_image_pixels < 1) {
    return out_of_range_value(label, "max_image_pixels", std::to_string(c.max_image_pixels), "must be >= 1");
  }
  const std::pair<const char*, double> weights[] = {
      {"qos.image", c.qos.image}, {"qos.audio", c.qos.audio}, {"qos.text", c.qos.text}};
  for (const auto& [key, value] : weights) {
    if (!(value >= 0) || !std::isfinite(value))
      return out_of_range_value(label, key, std::to_string(value), "must be >= 0");
  }
  const std::pair<const char*, double> maxima[] = {{"qos.image_tokens_max", c.qos.image_tokens_max},
                                                   {"qos.audio_seconds_max", c.qos.audio_seconds_max},
                                                   {"qos.text_chars_max", c.qos.text_chars_max}};
  for (const auto& [key, value] : maxima) {
    if (!(value > 0) || !std::isfinite(value))
      return out_of_range_value(label, key, std::to_string(value), "must be > 0");
  }
  return ok_status();
}

StatusOr<ServerConfig> parse_server_config(const std::string& yaml_text, const std::string& label) {
  ASSIGN_OR_RETURN(YAML::Node root, load_map(yaml_text, label));
  ServerConfig c;
  auto set_double = [&](double* field) {
    return [&label, field](const YAML::Node& n, const std::string& key) -> Status {
      ASSIGN_OR_RETURN(*field, read_double(n, label, key));
      return ok_status();
    };
  };
  const std::map<std::string, KeyHandler> qos_handlers = {
      {"image", set_double(&c.qos.image)},
      {"audio", set_double(&c.qos.audio)},
      {"text", set_double(&c.qos.text)},
      {"image_tokens_max", set_double(&c.qos.image_tokens_max)},
      {"audio_seconds_max", set_double(&c.qos.audio_seconds_max)},
      {"text_chars_max", set_double(&c.qos.text_chars_max)},
  };
  const std::map<std::string, KeyHandler> handlers = {
      {"model_repository",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.model_repository, read_string(n, label, key));
         return ok_status();
       }},
      {"models_to_load",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.models_to_load, read_list<std::string>(n, label, key, read_string));
         return ok_status();
       }},
      {"policy",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(std::string policy, read_string(n, label, key));
         if (policy == "fifo") {
           c.policy = SchedulingPolicy::kFifo;
         } else if (policy == "qos") {
           c.policy = SchedulingPolicy::kQos;
         } else {
           return invalid_argument(where(label, key) + ": '" + policy + "' is not one of fifo, qos");
         }
         return ok_status();
       }},
      {"aging_ms_per_level", set_double(&c.aging_ms_per_level)},
      {"preprocess_threads",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.preprocess_threads, read_int32(n, label, key));
         return ok_status();
       }},
      {"preprocess_queue",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.preprocess_queue, read_int32(n, label, key));
         return ok_status();
       }},
      {"background_nice",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.background_nice, read_int32(n, label, key));
         return ok_status();
       }},
      {"max_image_pixels",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         ASSIGN_OR_RETURN(c.max_image_pixels, read_int(n, label, key));
         return ok_status();
       }},
      {"qos",
       [&](const YAML::Node& n, const std::string& key) -> Status {
         if (!n.IsMap()) return invalid_argument(where(label, key) + ": expected a map, got " + scalar_text(n));
         return for_each_key(n, label, key + ".", qos_handlers);
       }},
  };
  RETURN_IF_ERROR(for_each_key(root, label, "", handlers));
  RETURN_IF_ERROR(validate_server_config(c, label));
  return c;
}

StatusOr<ServerConfig> load_server_config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_server_config(text, path);
}

}  // namespace mmserve::serving
