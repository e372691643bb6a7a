// The request mix of `mmserve bench`: a list of request classes, each with a weight, a kind of input, an
// API, a priority class and the texts/images it sends. Read from a YAML (or JSON, which is YAML) file, or the
// built-in mix (60% text over OpenAI at priority 1, 30% images over KServe at priority 2, 10% large images
// over KServe at priority 3). The file's format, with every key and its default:
//
//   timeout_s: 30                 # per-request limit: connect, send, and each wait for response bytes
//   keep_alive: true              # reuse each connection (false: one TCP connection per request)
//   classes:
//     - name: text                # unique; names the class in the report
//       weight: 60                # relative share of the arrivals (> 0)
//       kind: text                # text | image | large_image | text+image
//       api: openai               # kserve (POST /v2/models/M/infer) | openai (POST /v1/embeddings)
//       priority: 1               # x-mmserve-priority (1 = highest); 0 = the model's default
//       deadline_ms: 0            # x-mmserve-timeout-ms; 0 = none
//       encoding_format: float    # openai only: float | base64
//       texts: ["a photo of a cat"]          # text kinds; default: eight built-in captions
//       images: [../images/chelsea.png]      # image kinds; relative to the profile's directory;
//       image_size: [320, 240]               #   default: four synthesised images of this size
//       image_format: png                    #   (png | jpeg; defaults image 320x240 png, large 1920x1080 jpeg)
//
// Unknown keys and wrong values are errors naming the class and the key. Tested end to end by
// tests/e2e/client_test.sh bench (a profile with every kind and both APIs against the real server).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace mmserve::cli {

enum class BenchKind { kText, kImage, kLargeImage, kTextImage };
enum class BenchApi { kKserve, kOpenai };

const char* bench_kind_name(BenchKind kind);  // "text", "image", "large_image", "text+image"
const char* bench_api_name(BenchApi api);     // "kserve", "openai"

struct BenchClass {
  std::string name;
  double weight = 1;
  BenchKind kind = BenchKind::kText;
  BenchApi api = BenchApi::kKserve;
  int priority = 0;
  int deadline_ms = 0;
  std::string encoding_format = "float";
  std::vector<std::string> texts;         // empty: the built-in captions
  std::vector<std::string> image_files;   // absolute or relative to the working directory once parsed
  int image_width = 0, image_height = 0;  // synthesised images (when image_files is empty); 0 = the kind's default
  std::string image_format;               // "png" | "jpeg"; empty = the kind's default

  bool has_text() const { return kind == BenchKind::kText || kind == BenchKind::kTextImage; }
  bool has_image() const { return kind != BenchKind::kText; }
};

struct BenchProfile {
  std::string source = "built-in";  // the file it came from
  double timeout_s = 30;
  bool keep_alive = true;
  std::vector<BenchClass> classes;
};

// The default mix described above.
BenchProfile default_bench_profile();
// Reads and validates a profile file; kInvalidArgument/kNotFound name the file and the offending key.
StatusOr<BenchProfile> load_bench_profile(const std::string& path);
// Parses profile text; image paths are resolved against `base_dir`.
StatusOr<BenchProfile> parse_bench_profile(const std::string& text, const std::string& label,
                                           const std::string& base_dir);

}  // namespace mmserve::cli
