// libFuzzer target for convert_llama2c (models/llama/llama2c.h): llama2.c checkpoint and tokenizer bytes in, no
// crash, leak or partial output out.
//
// The input's first 14 bytes are the checkpoint header's fields (two bytes each, kept small so the float tables stay
// tiny; byte 13's low bit also flips the shared-classifier sign), and byte 14 says how the checkpoint's size is
// built: the exact size the header asks for (random floats) or that size plus or minus a few bytes. The rest of the
// input is the tokenizer file. Checked: the call returns a Status; on an error the output directory does not exist;
// on success config.json, model.safetensors and tokenizer.json exist and tokenizer.json parses as JSON.
// Run: build/fuzz/fuzz/llama2c_fuzz -max_total_time=60 fuzz/corpus/llama2c_fuzz
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/llama/llama2c.h"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 15) return 0;
  int32_t header[7];
  for (int i = 0; i < 7; ++i) header[i] = static_cast<int16_t>(data[2 * i] | (data[2 * i + 1] << 8)) % 40;
  if (data[13] & 1) header[5] = -header[5];
  const int64_t dim = header[0], hidden = header[1], layers = header[2], heads = header[3] > 0 ? header[3] : 1;
  const int64_t kv_heads = header[4] > 0 ? header[4] : 1, vocab = header[5] < 0 ? -header[5] : header[5];
  const int64_t seq = header[6], hd = dim / heads, kv = kv_heads * hd;
  int64_t floats = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kv + 3 * hidden * dim) + dim +
                   seq * hd + (header[5] < 0 ? vocab * dim : 0);
  if (floats < 0 || floats > (int64_t{1} << 20)) floats = 0;  // absurd (negative fields): a header-only file
  const int adjust = static_cast<int>(data[14] % 7) - 3;       // 0 most often gives the exact size
  std::string checkpoint(reinterpret_cast<const char*>(header), sizeof(header));
  const int64_t bytes = std::max<int64_t>(0, floats * 4 + (data[14] % 2 == 0 ? 0 : adjust));
  for (int64_t i = 0; i < bytes; ++i) checkpoint.push_back(static_cast<char>((i * 131 + 7) % 251));
  const std::string tokenizer(reinterpret_cast<const char*>(data + 15), size - 15);

  static const fs::path dir = fs::temp_directory_path() / ("mmserve_llama2c_fuzz_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path ckpt = dir / "model.bin", tok = dir / "tok.bin", out = dir / "out";
  std::ofstream(ckpt, std::ios::binary) << checkpoint;
  std::ofstream(tok, std::ios::binary) << tokenizer;
  fs::remove_all(out);
  const mmserve::Status status = mmserve::models::convert_llama2c(ckpt.string(), tok.string(), out.string());
  if (!status.ok()) {
    if (status.message().empty() || fs::exists(out)) __builtin_trap();  // a message, and nothing written
    return 0;
  }
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::exists(out / f)) __builtin_trap();
  }
  std::ifstream in(out / "tokenizer.json");
  if (nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false).is_discarded()) __builtin_trap();
  fs::remove_all(out);
  return 0;
}
