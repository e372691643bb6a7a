// libFuzzer target for HfTokenizer: arbitrary bytes in, no crash out, and the tokenizer's promises hold.
//
// The first byte picks the mode; the rest is the payload.
//   mode % 4 == 0: the payload is a tokenizer.json (and, with mode bit 2, it is loaded with transformers' rules
//                  and a LlamaTokenizer config): loading either succeeds or returns a Status, never crashes; a
//                  loaded tokenizer then encodes and decodes a few fixed strings within its promises.
//   mode % 4 == 1: the payload is text for one of the four small fixtures (tests/fixtures/hf_tokenizers, picked
//                  by mode >> 2): encode succeeds exactly on well-formed UTF-8; every id is below vocab_size;
//                  decode gives valid UTF-8; streaming the ids gives valid UTF-8 pieces that, with finish(),
//                  add up to the decode (or the strict stream reports the decoder not prefix-stable; the
//                  resyncing one never fails).
//   mode % 4 >= 2: the payload is ids (two bytes each, some past the vocabulary): decode succeeds exactly when
//                  every id is in range, and the stream's pieces are valid UTF-8.
// Fixtures are found from $MMSERVE_SOURCE_DIR, else by walking up from the executable's directory.
// Run: build/fuzz/fuzz/hf_tokenizer_fuzz -max_total_time=60 fuzz/corpus/hf_tokenizer_fuzz
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "frontends/text/hf_tokenizer.h"
#include "frontends/text/unicode_text.h"

namespace {

using mmserve::StatusCode;
using mmserve::text::HfTokenizer;
using mmserve::text::IncrementalDetokenizer;

constexpr std::array<const char*, 4> kFixtures = {"sp_metaspace", "metaspace_legacy", "subword_prefix",
                                                  "byte_level_split"};

std::string source_dir() {
  if (const char* env = std::getenv("MMSERVE_SOURCE_DIR")) return env;
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / "tests" / "fixtures" / "hf_tokenizers", ec)) return dir.string();
  }
  return ".";
}

const HfTokenizer& fixture(size_t i) {
  static const std::vector<std::unique_ptr<HfTokenizer>> loaded = [] {
    std::vector<std::unique_ptr<HfTokenizer>> out;
    for (const char* name : kFixtures) {
      const std::string dir = source_dir() + "/tests/fixtures/hf_tokenizers/" + name;
      auto t = HfTokenizer::from_model_dir(dir);
      if (!t.ok()) {
        std::fprintf(stderr, "hf_tokenizer_fuzz: cannot load %s: %s (set MMSERVE_SOURCE_DIR)\n", dir.c_str(),
                     t.status().to_string().c_str());
        std::abort();
      }
      out.push_back(std::move(t).value());
    }
    return out;
  }();
  return *loaded[i % loaded.size()];
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "hf_tokenizer_fuzz: broken promise: %s\n", what);
    __builtin_trap();
  }
}

bool valid_utf8(const std::string& s) {
  return mmserve::text::validate_utf8(s).ok();
}

// Streams `ids` both ways; checks every piece and, when the strict stream completes, that it adds up to the
// decode; the resyncing stream never fails on in-range ids.
void check_stream(const HfTokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  using Divergence = IncrementalDetokenizer::Divergence;
  for (const Divergence divergence : {Divergence::kFail, Divergence::kResync}) {
    IncrementalDetokenizer d(t, skip, divergence);
    std::string streamed;
    bool diverged = false;
    for (const int32_t id : ids) {
      auto piece = d.step(id);
      if (!piece.ok()) {
        check(divergence == Divergence::kFail && piece.status().code() == StatusCode::kFailedPrecondition,
              "only the strict stream fails, with FailedPrecondition");
        diverged = true;
        break;
      }
      check(valid_utf8(*piece), "stream pieces are valid UTF-8");
      check(piece->size() < 3 || piece->compare(piece->size() - 3, 3, "\xEF\xBF\xBD") != 0, "no piece ends in U+FFFD");
      streamed += *piece;
    }
    if (diverged) continue;
    auto rest = d.finish();
    if (!rest.ok()) {
      check(divergence == Divergence::kFail && rest.status().code() == StatusCode::kFailedPrecondition,
            "only the strict finish fails, with FailedPrecondition");
      continue;
    }
    check(valid_utf8(*rest), "finish gives valid UTF-8");
    streamed += *rest;
    if (divergence == Divergence::kFail) {
      auto full = t.decode(ids, skip);
      check(full.ok() && streamed == *full, "the strict stream adds up to the decode");
    }
  }
}

void exercise(const HfTokenizer& t, const std::string& text) {
  const auto ids = t.encode(text);
  check(ids.ok() == valid_utf8(text), "encode succeeds exactly on valid UTF-8");
  if (!ids.ok()) return;
  for (const int32_t id : *ids) check(id >= 0 && id < t.vocab_size(), "id in range");
  const auto plain = t.encode(text, false);
  check(plain.ok(), "encode without special tokens");
  const auto pair = t.encode_pair(text, text);
  check(pair.ok(), "encode_pair");
  for (const bool skip : {false, true}) {
    const auto decoded = t.decode(*ids, skip);
    check(decoded.ok() && valid_utf8(*decoded), "decode gives valid UTF-8");
    check_stream(t, *ids, skip);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string payload(reinterpret_cast<const char*>(data + 1), size - 1);
  if (mode % 4 == 0) {
    auto j = mmserve::parse_json(payload, "fuzz.json");
    if (!j.ok()) return 0;
    nlohmann::json config;
    if (mode & 4) config = {{"tokenizer_class", "LlamaTokenizer"}, {"legacy", (mode & 8) != 0}};
    auto t = HfTokenizer::from_json(*j, config, "fuzz.json");
    if (!t.ok()) return 0;
    for (const char* text : {"", " ", "Hello  world\n", "a\xC3\xA9\xF0\x9F\x98\x80 12", "<s></s>"}) exercise(**t, text);
    return 0;
  }
  const HfTokenizer& t = fixture(mode >> 2);
  if (mode % 4 == 1) {
    exercise(t, payload);
    return 0;
  }
  std::vector<int32_t> ids;
  bool in_range = true;
  for (size_t i = 0; i + 1 < payload.size(); i += 2) {
    const int32_t raw = static_cast<uint8_t>(payload[i]) | (static_cast<uint8_t>(payload[i + 1]) << 8);
    const int32_t id = raw % 1024 - 16;  // mostly in range; some negative, some past the vocabulary
    in_range = in_range && id >= 0 && id < t.vocab_size();
    ids.push_back(id);
  }
  for (const bool skip : {false, true}) {
    const auto decoded = t.decode(ids, skip);
    check(decoded.ok() == in_range, "decode succeeds exactly when every id is in range");
    if (!decoded.ok()) continue;
    check(valid_utf8(*decoded), "decode gives valid UTF-8");
    check_stream(t, ids, skip);
  }
  return 0;
}
