// Profile parsing for `mmserve bench` (see bench_profile.h for the format). The only file of the bench that
// touches yaml-cpp, so its exceptions are caught here and become Status messages naming the file and key.
#include "cli/bench_profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

namespace mmserve::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 3> kProfileKeys = {"timeout_s", "keep_alive", "classes"};
constexpr std::array<std::string_view, 11> kClassKeys = {"name",       "weight",       "kind",           "api",
                                                         "priority",   "deadline_ms",  "texts",          "images",
                                                         "image_size", "image_format", "encoding_format"};

template <size_t N>
Status unknown_keys(const YAML::Node& map, const std::array<std::string_view, N>& allowed, const std::string& where) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return invalid_argument(where + ": unknown key '" + key + "'");
    }
  }
  return ok_status();
}

StatusOr<BenchKind> parse_kind(const std::string& s) {
  if (s == "text") return BenchKind::kText;
  if (s == "image") return BenchKind::kImage;
  if (s == "large_image") return BenchKind::kLargeImage;
  if (s == "text+image") return BenchKind::kTextImage;
  return invalid_argument("kind must be text, image, large_image or text+image, not '" + s + "'");
}

StatusOr<BenchApi> parse_api(const std::string& s) {
  if (s == "kserve") return BenchApi::kKserve;
  if (s == "openai") return BenchApi::kOpenai;
  return invalid_argument("api must be kserve or openai, not '" + s + "'");
}

// Parses one class; yaml-cpp conversion errors propagate as exceptions to parse_bench_profile.
StatusOr<BenchClass> parse_class(const YAML::Node& node, const std::string& where, const fs::path& base_dir) {
  if (!node.IsMap()) return invalid_argument(where + ": a class must be a mapping");
  RETURN_IF_ERROR(unknown_keys(node, kClassKeys, where));
  BenchClass c;
  if (!node["name"]) return invalid_argument(where + ": 'name' is required");
  c.name = node["name"].as<std::string>();
  const std::string at = where + " (" + c.name + ")";
  if (node["weight"]) c.weight = node["weight"].as<double>();
  if (!(c.weight > 0)) return invalid_argument(at + ": 'weight' must be > 0");
  if (!node["kind"]) return invalid_argument(at + ": 'kind' is required");
  auto kind = parse_kind(node["kind"].as<std::string>());
  if (!kind.ok()) return kind.status().with_context(at);
  c.kind = *kind;
  if (node["api"]) {
    auto api = parse_api(node["api"].as<std::string>());
    if (!api.ok()) return api.status().with_context(at);
    c.api = *api;
  }
  if (node["priority"]) c.priority = node["priority"].as<int>();
  if (c.priority < 0) return invalid_argument(at + ": 'priority' must be >= 0");
  if (node["deadline_ms"]) c.deadline_ms = node["deadline_ms"].as<int>();
  if (c.deadline_ms < 0) return invalid_argument(at + ": 'deadline_ms' must be >= 0");
  if (node["encoding_format"]) c.encoding_format = node["encoding_format"].as<std::string>();
  if (c.encoding_format != "float" && c.encoding_format != "base64") {
    return invalid_argument(at + ": 'encoding_format' must be float or base64");
  }
  if (node["texts"]) c.texts = node["texts"].as<std::vector<std::string>>();
  if (node["images"]) {
    for (const std::string& file : node["images"].as<std::vector<std::string>>()) {
      fs::path p(file);
      if (p.is_relative()) p = base_dir / p;
      if (!fs::is_regular_file(p)) return not_found(at + ": image file not found: " + p.string());
      c.image_files.push_back(p.string());
    }
  }
  if (node["image_size"]) {
    const auto size = node["image_size"].as<std::vector<int>>();
    if (size.size() != 2 || size[0] < 1 || size[1] < 1 || size[0] > 16384 || size[1] > 16384) {
      return invalid_argument(at + ": 'image_size' must be [width, height], each in 1..16384");
    }
    c.image_width = size[0];
    c.image_height = size[1];
  }
  if (node["image_format"]) c.image_format = node["image_format"].as<std::string>();
  if (!c.image_format.empty() && c.image_format != "png" && c.image_format != "jpeg") {
    return invalid_argument(at + ": 'image_format' must be png or jpeg");
  }
  if (!c.has_text() && node["texts"]) return invalid_argument(at + ": 'texts' given for a kind without text");
  if (!c.has_image() && (node["images"] || node["image_size"] || node["image_format"])) {
    return invalid_argument(at + ": image keys given for kind text");
  }
  return c;
}

}  // namespace

const char* bench_kind_name(BenchKind kind) {
  switch (kind) {
    case BenchKind::kText: return "text";
    case BenchKind::kImage: return "image";
    case BenchKind::kLargeImage: return "large_image";
    case BenchKind::kTextImage: return "text+image";
  }
  return "?";
}

const char* bench_api_name(BenchApi api) {
  return api == BenchApi::kOpenai ? "openai" : "kserve";
}

BenchProfile default_bench_profile() {
  BenchProfile p;
  BenchClass text;
  text.name = "text";
  text.weight = 60;
  text.kind = BenchKind::kText;
  text.api = BenchApi::kOpenai;
  text.priority = 1;
  BenchClass image;
  image.name = "image";
  image.weight = 30;
  image.kind = BenchKind::kImage;
  image.api = BenchApi::kKserve;
  image.priority = 2;
  BenchClass large = image;
  large.name = "large_image";
  large.weight = 10;
  large.kind = BenchKind::kLargeImage;
  large.priority = 3;
  p.classes = {text, image, large};
  return p;
}

StatusOr<BenchProfile> parse_bench_profile(const std::string& text, const std::string& label,
                                           const std::string& base_dir) {
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) return invalid_argument(label + ": the profile must be a mapping with 'classes'");
    RETURN_IF_ERROR(unknown_keys(root, kProfileKeys, label));
    BenchProfile p;
    p.source = label;
    if (root["timeout_s"]) p.timeout_s = root["timeout_s"].as<double>();
    if (!(p.timeout_s > 0 && p.timeout_s <= 3600))
      return invalid_argument(label + ": 'timeout_s' must be in (0, 3600]");
    if (root["keep_alive"]) p.keep_alive = root["keep_alive"].as<bool>();
    const YAML::Node classes = root["classes"];
    if (!classes || !classes.IsSequence() || classes.size() == 0) {
      return invalid_argument(label + ": 'classes' must be a non-empty list");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < classes.size(); ++i) {
      auto c = parse_class(classes[i], label + ": classes[" + std::to_string(i) + "]", fs::path(base_dir));
      if (!c.ok()) return c.status();
      if (!names.insert(c->name).second) return invalid_argument(label + ": duplicate class name '" + c->name + "'");
      p.classes.push_back(std::move(c).value());
    }
    return p;
  } catch (const YAML::Exception& e) {
    return invalid_argument(label + ": " + e.what());
  }
}

StatusOr<BenchProfile> load_bench_profile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read profile " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const fs::path dir = fs::absolute(fs::path(path)).parent_path();
  return parse_bench_profile(ss.str(), path, dir.string());
}

}  // namespace mmserve::cli
