// The request bodies `mmserve bench` sends, built once before the run so that the send loop only writes
// bytes: per class a few variants (one per text/image, at most kMaxVariants), each a ready HTTP path + JSON
// body for the class's API (KServe v2 infer with BYTES inputs, or OpenAI /v1/embeddings with data-URL
// images), as docs/api.md specifies. Images come from the profile's files or are synthesised here as real
// PNG/JPEG files (libpng, libjpeg) with seeded content, so the server decodes and resizes them for real.
// Tested end to end by tests/e2e/client_test.sh bench (the real server must answer every variant with 200).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/bench_profile.h"
#include "core/status.h"

namespace mmserve::cli {

inline constexpr int kMaxVariants = 8;

struct PreparedRequest {
  std::string path;  // with the URL's base path, e.g. "/v2/models/demo-clip/infer"
  std::string body;  // JSON
};

struct PreparedClass {
  BenchClass spec;
  std::vector<std::pair<std::string, std::string>> headers;  // priority and deadline headers
  std::vector<PreparedRequest> variants;                     // never empty
  double body_bytes_mean = 0;
};

// Builds every class's variants for `model`. kNotFound/kInvalidArgument for unreadable image files.
StatusOr<std::vector<PreparedClass>> prepare_requests(const BenchProfile& profile, const std::string& model,
                                                      const std::string& base_path);

// Synthesised test images: a smooth colour field with shapes and seeded noise, encoded as a real file.
StatusOr<std::string> synthesize_png(int width, int height, unsigned seed);
StatusOr<std::string> synthesize_jpeg(int width, int height, unsigned seed, int quality = 90);

// Standard base64 (RFC 4648, with padding).
std::string base64_encode(const std::string& bytes);

}  // namespace mmserve::cli
