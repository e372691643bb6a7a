// The `mmserve` subcommands. Each returns the process exit code: 0 on success, 1 on an error the user
// caused or can fix (the message is printed to stderr), 2 for usage errors (CLI11 prints those).
#pragma once

#include <string>
#include <vector>

namespace mmserve::cli {

struct EmbedArgs {
  std::string model_dir;
  std::vector<std::string> images;
  std::vector<std::string> texts;
  std::string output = "json";
  int threads = 0;
  int batch = 64;
  long long max_pixels = 64LL * 1024 * 1024;
};
int run_embed(const EmbedArgs& args);

struct TokenizeArgs {
  std::string model_dir;
  std::vector<std::string> texts;
  bool no_special = false;
  bool no_truncation = false;
};
int run_tokenize(const TokenizeArgs& args);

int run_inspect(const std::string& model_dir);
int run_demo_model(const std::string& output_dir, bool overwrite, const std::string& architecture);

// Prints "mmserve: error: <message>" to stderr and returns 1.
int fail(const std::string& message);

}  // namespace mmserve::cli
