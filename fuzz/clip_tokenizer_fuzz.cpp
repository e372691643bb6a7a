// libFuzzer target for the CLIP tokenizer: arbitrary bytes in, no crash out, and the encoder's promises hold.
//
// The first byte picks the options (special tokens on/off, max_length 0 / 77 / 1..16); the rest is the text.
// Checked on every input: valid UTF-8 always encodes (invalid UTF-8 is an InvalidArgument, never a crash);
// with special tokens the ids start with BOS and end with EOS; truncation never exceeds max_length; every id
// is below vocab_size; decode gives valid UTF-8, which itself encodes. A broken promise traps.
// The tokenizer is loaded once, from $MMSERVE_TOKENIZER_DIR, else the first assets/clip_tokenizer found
// walking up from the executable's directory (build/fuzz/fuzz/ -> the source tree).
// Run: build/fuzz/fuzz/clip_tokenizer_fuzz -max_total_time=60 fuzz/corpus/clip_tokenizer_fuzz
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "frontends/text/clip_tokenizer.h"

namespace {

using mmserve::text::ClipTokenizer;
using mmserve::text::EncodeOptions;

std::string tokenizer_dir() {
  if (const char* env = std::getenv("MMSERVE_TOKENIZER_DIR")) return env;
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    const auto candidate = dir / "assets" / "clip_tokenizer";
    if (std::filesystem::exists(candidate / "vocab.json", ec)) return candidate.string();
  }
  return "assets/clip_tokenizer";
}

const ClipTokenizer& tokenizer() {
  static const std::unique_ptr<ClipTokenizer> instance = [] {
    const std::string dir = tokenizer_dir();
    auto loaded = ClipTokenizer::from_model_dir(dir);
    if (!loaded.ok()) {
      std::fprintf(stderr, "clip_tokenizer_fuzz: cannot load %s: %s (set MMSERVE_TOKENIZER_DIR)\n", dir.c_str(),
                   loaded.status().to_string().c_str());
      std::abort();
    }
    return std::move(loaded).value();
  }();
  return *instance;
}

bool valid_utf8(const std::string& s) {
  return tokenizer().encode(s, {.max_length = 0}).ok();
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "clip_tokenizer_fuzz: broken promise: %s\n", what);
    __builtin_trap();
  }
}

// Reference UTF-8 well-formedness (Unicode Table 3-7), independent of the tokenizer's own validator.
bool well_formed(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    size_t len = 1;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    } else {
      return false;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  EncodeOptions options;
  options.add_special_tokens = (mode & 1) != 0;
  options.max_length = (mode & 6) == 0 ? 0 : (mode & 6) == 2 ? 77 : 2 + (mode >> 3) % 15;

  const ClipTokenizer& t = tokenizer();
  const auto ids = t.encode(text, options);
  check(ids.ok() == well_formed(data + 1, size - 1), "encode succeeds exactly on well-formed UTF-8");
  if (!ids.ok()) return 0;
  if (options.max_length > 0) check(ids->size() <= static_cast<size_t>(options.max_length), "truncation");
  if (options.add_special_tokens) {
    check(ids->size() >= 2 && ids->front() == t.bos_id() && ids->back() == t.eos_id(), "BOS ... EOS");
  }
  for (const int32_t id : *ids) check(id >= 0 && id < t.vocab_size(), "id in range");
  check(valid_utf8(t.decode(*ids)), "decode gives valid UTF-8");
  return 0;
}
