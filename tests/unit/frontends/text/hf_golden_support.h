// Shared by hf_tokenizer_test.cpp and hf_tokenizer_real_test.cpp: checks an HfTokenizer against the goldens that
// tools/reference/hf_tokenizer_goldens.py wrote with HF transformers 5.17 / tokenizers 0.23 on the GPU host
// (tests/fixtures/hf_tokenizer_goldens/<name>.json; the fields are described in that script).
//
// `auto_tok` is from_model_dir (AutoTokenizer's goldens: ids, ids_plain, decode, decode_skip, stream), `raw`
// is from_tokenizer_json (Tokenizer.from_file's: raw_ids, raw_ids_plain, raw_decode, raw_decode_skip). Every
// mismatch is reported with its string; the counts of strings checked are returned for the caller to assert.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_config.h"
#include "frontends/text/hf_tokenizer.h"
#include "test_paths.h"

namespace mmserve::text::testing_hf {

using nlohmann::json;

inline json load_golden(const std::string& name) {
  auto golden = read_json_file(MMSERVE_FIXTURES_DIR + "/hf_tokenizer_goldens/" + name + ".json");
  EXPECT_TRUE(golden.ok()) << golden.status().to_string();
  return golden.ok() ? *golden : json();
}

inline std::vector<int32_t> ids_of(const json& j) {
  return j.get<std::vector<int32_t>>();
}

// A result, or a stand-in that no golden equals (the error's text, or the id list {-1}).
inline std::string or_error(const StatusOr<std::string>& s) {
  return s.ok() ? *s : "<error: " + s.status().to_string() + ">";
}
inline std::vector<int32_t> or_error(const StatusOr<std::vector<int32_t>>& s) {
  return s.ok() ? *s : std::vector<int32_t>{-1};
}

// The per-id strings of IncrementalDetokenizer ("" where DecodeStream gave null), or the error text.
inline json stream_of(const HfTokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer d(t, skip);
  json out = json::array();
  for (const int32_t id : ids) {
    auto piece = d.step(id);
    if (!piece.ok()) return json{{"error", piece.status().to_string()}};
    out.push_back(piece->empty() ? json() : json(*piece));
  }
  return out;
}

// Compares a golden stream (strings and nulls, or {"error": ...}) with ours; an error only has to be an error.
inline bool same_stream(const json& golden, const json& ours) {
  if (golden.is_object()) return ours.is_object();
  return golden == ours;
}

struct Counts {
  int entries = 0;
  int streams = 0;
  int pairs = 0;
  int decodes = 0;
};

inline Counts check_goldens(const json& golden, const HfTokenizer& auto_tok, const HfTokenizer& raw) {
  Counts n;
  for (const json& e : golden["entries"]) {
    const std::string text = e["text"].get<std::string>();
    const std::string shown = json(text).dump();
    auto ids = auto_tok.encode(text, true);
    auto ids_plain = auto_tok.encode(text, false);
    auto raw_ids = raw.encode(text, true);
    auto raw_plain = raw.encode(text, false);
    if (!ids.ok() || !ids_plain.ok() || !raw_ids.ok() || !raw_plain.ok()) {
      ADD_FAILURE() << shown << ": encode failed";
      continue;
    }
    EXPECT_EQ(*ids, ids_of(e["ids"])) << shown;
    EXPECT_EQ(*ids_plain, ids_of(e["ids_plain"])) << shown;
    EXPECT_EQ(*raw_ids, ids_of(e["raw_ids"])) << shown;
    EXPECT_EQ(*raw_plain, ids_of(e["raw_ids_plain"])) << shown;
    const std::vector<int32_t> golden_ids = ids_of(e["ids"]);
    EXPECT_EQ(or_error(auto_tok.decode(golden_ids, false)), e["decode"].get<std::string>()) << shown;
    EXPECT_EQ(or_error(auto_tok.decode(golden_ids, true)), e["decode_skip"].get<std::string>()) << shown;
    EXPECT_EQ(or_error(raw.decode(golden_ids, false)), e["raw_decode"].get<std::string>()) << shown;
    EXPECT_EQ(or_error(raw.decode(golden_ids, true)), e["raw_decode_skip"].get<std::string>()) << shown;
    if (e.contains("stream")) {
      EXPECT_TRUE(same_stream(e["stream"], stream_of(auto_tok, golden_ids, false))) << shown;
      EXPECT_TRUE(same_stream(e["stream_skip"], stream_of(auto_tok, golden_ids, true))) << shown << " (skip)";
      ++n.streams;
    }
    ++n.entries;
  }
  for (const json& p : golden["pairs"]) {
    const std::string a = p["a"].get<std::string>();
    const std::string b = p["b"].get<std::string>();
    EXPECT_EQ(or_error(auto_tok.encode_pair(a, b)), ids_of(p["ids"])) << a << " | " << b;
    EXPECT_EQ(or_error(raw.encode_pair(a, b)), ids_of(p["raw_ids"])) << a << " | " << b;
    ++n.pairs;
  }
  for (const json& d : golden["decodes"]) {
    const std::vector<int32_t> ids = ids_of(d["ids"]);
    const std::string shown = d["ids"].dump();
    EXPECT_EQ(or_error(auto_tok.decode(ids, false)), d["decode"].get<std::string>()) << shown;
    EXPECT_EQ(or_error(auto_tok.decode(ids, true)), d["decode_skip"].get<std::string>()) << shown;
    EXPECT_EQ(or_error(raw.decode(ids, false)), d["raw_decode"].get<std::string>()) << shown;
    EXPECT_TRUE(same_stream(d["stream"], stream_of(auto_tok, ids, false)))
        << shown << ": ours " << stream_of(auto_tok, ids, false).dump() << " HF " << d["stream"].dump();
    ++n.decodes;
  }
  return n;
}

// config_variants: the directory's tokenizer_config.json with some keys set, through from_json.
inline int check_config_variants(const json& golden, const json& tokenizer_json, const json& config_json) {
  int n = 0;
  for (const json& v : golden["config_variants"]) {
    json config = config_json;
    for (const auto& [key, value] : v["config"].items()) config[key] = value;
    auto t = HfTokenizer::from_json(tokenizer_json, config, "variant " + v["config"].dump());
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      continue;
    }
    for (const json& e : v["entries"]) {
      EXPECT_EQ(or_error((*t)->encode(e["text"].get<std::string>())), ids_of(e["ids"]))
          << v["config"].dump() << " " << e["text"].dump();
    }
    for (const json& p : v["pairs"]) {
      EXPECT_EQ(or_error((*t)->encode_pair(p["a"].get<std::string>(), p["b"].get<std::string>())), ids_of(p["ids"]))
          << v["config"].dump();
    }
    ++n;
  }
  return n;
}

}  // namespace mmserve::text::testing_hf
