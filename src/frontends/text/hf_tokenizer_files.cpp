// HF tokenizer-directory readers (see hf_tokenizer_files.h). Moved here from clip_tokenizer_loader.cpp so that
// the CLIP and Whisper loaders share one copy. Tests: tests/unit/frontends/text/clip_tokenizer_loader_test.cpp,
// whisper_tokenizer_test.cpp.
#include "frontends/text/hf_tokenizer_files.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "frontends/text/unicode_text.h"

namespace mmserve::text::hf {
namespace {

using nlohmann::json;

Status split_merge(std::string_view line, const std::string& label, Merges& merges) {
  const size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
      line.find(' ', space + 1) != std::string_view::npos) {
    return invalid_argument(label + ": expected two space-separated symbols, got \"" + std::string(line) + "\"");
  }
  merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  return ok_status();
}

}  // namespace

bool is_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

StatusOr<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found(path + ": no such file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return failed_precondition(path + ": cannot open");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return failed_precondition(path + ": read failed");
  return buffer.str();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

StatusOr<AddedToken> parse_added_token(const json& j, const std::string& label, bool special_default) {
  AddedToken t;
  if (j.is_string()) {
    t.content = j.get<std::string>();
    t.special = special_default;
    t.normalized = !t.special;
    return t;
  }
  if (!j.is_object()) return invalid_argument(label + ": expected a string or an AddedToken object");
  const auto content = j.find("content");
  if (content == j.end() || !content->is_string()) return invalid_argument(label + ": missing \"content\"");
  t.content = content->get<std::string>();
  t.special = bool_or(j, "special", special_default);
  t.single_word = bool_or(j, "single_word", false);
  t.lstrip = bool_or(j, "lstrip", false);
  t.rstrip = bool_or(j, "rstrip", false);
  t.normalized = bool_or(j, "normalized", !t.special);
  return t;
}

std::string component_type(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

StatusOr<int32_t> parse_id(const json& j, const std::string& label) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > INT32_MAX) {
    return invalid_argument(label + ": expected a non-negative integer id");
  }
  return static_cast<int32_t>(j.get<int64_t>());
}

StatusOr<Vocab> parse_vocab(const json& j, const std::string& label) {
  if (!j.is_object()) return invalid_argument(label + ": expected an object of token -> id");
  Vocab vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    ASSIGN_OR_RETURN(vocab[token], parse_id(id, label + ": \"" + token + "\""));
  }
  return vocab;
}

StatusOr<Merges> parse_merges_txt(const std::string& text, const std::string& path) {
  if (Status s = validate_utf8(text); !s.ok()) return s.with_context(path);
  Merges merges;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    RETURN_IF_ERROR(split_merge(line, path + ": line " + std::to_string(line_number), merges));
  }
  return merges;
}

StatusOr<Merges> parse_merges_json(const json& j, const std::string& label) {
  if (!j.is_array()) return invalid_argument(label + ": expected an array");
  Merges merges;
  merges.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const json& m = j[i];
    const std::string item = label + "[" + std::to_string(i) + "]";
    if (m.is_string()) {
      RETURN_IF_ERROR(split_merge(m.get_ref<const std::string&>(), item, merges));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return invalid_argument(item + ": expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

StatusOr<BpeConfig> parse_bpe_model(const json& model, const std::string& label) {
  if (!model.is_object()) return invalid_argument(label + ": \"model\" must be an object");
  if (const auto type = model.find("type"); type != model.end() && *type != "BPE") {
    return unimplemented(label + ": model type " + type->dump() + " is not supported (BPE only)");
  }
  const auto vocab = model.find("vocab");
  const auto merges = model.find("merges");
  if (vocab == model.end()) return invalid_argument(label + ": model has no \"vocab\"");
  if (merges == model.end()) return invalid_argument(label + ": model has no \"merges\"");
  if (const auto dropout = model.find("dropout");
      dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return unimplemented(label + ": BPE dropout is not supported");
  }
  BpeConfig config;
  ASSIGN_OR_RETURN(config.vocab, parse_vocab(*vocab, label + ": model.vocab"));
  ASSIGN_OR_RETURN(config.merges, parse_merges_json(*merges, label + ": model.merges"));
  const auto string_or = [&model](const char* key) -> std::optional<std::string> {
    const auto it = model.find(key);
    return it != model.end() && it->is_string() ? std::optional(it->get<std::string>()) : std::nullopt;
  };
  config.unk_token = string_or("unk_token");
  config.continuing_subword_prefix = string_or("continuing_subword_prefix").value_or("");
  config.end_of_word_suffix = string_or("end_of_word_suffix").value_or("");
  for (const auto& [key, value] :
       {std::pair{"fuse_unk", &config.fuse_unk}, std::pair{"byte_fallback", &config.byte_fallback},
        std::pair{"ignore_merges", &config.ignore_merges}}) {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) continue;
    if (!it->is_boolean()) return invalid_argument(label + ": model." + key + " must be a boolean");
    *value = it->get<bool>();
  }
  for (const char* key : {"unk_token", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !it->is_string()) {
      return invalid_argument(label + ": model." + key + " must be a string or null");
    }
  }
  return config;
}

StatusOr<std::vector<AddedToken>> parse_added_tokens(const json& tokenizer, const std::string& label) {
  std::vector<AddedToken> tokens;
  const auto list = tokenizer.find("added_tokens");
  if (list == tokenizer.end() || list->is_null()) return tokens;
  if (!list->is_array()) return invalid_argument(label + ": \"added_tokens\" must be an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string item = label + ": added_tokens[" + std::to_string(i) + "]";
    const json& entry = (*list)[i];
    ASSIGN_OR_RETURN(AddedToken token, parse_added_token(entry, item, false));
    const auto id = entry.is_object() ? entry.find("id") : entry.end();
    if (id == entry.end()) return invalid_argument(item + ": missing \"id\"");
    ASSIGN_OR_RETURN(token.id, parse_id(*id, item + ".id"));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

StatusOr<std::optional<std::vector<AddedToken>>> parse_added_tokens_decoder(const json& config,
                                                                            const std::string& path) {
  const auto decoder = config.find("added_tokens_decoder");
  if (decoder == config.end() || !decoder->is_object()) return std::optional<std::vector<AddedToken>>();
  std::vector<AddedToken> tokens;
  for (const auto& [key, value] : decoder->items()) {
    const std::string label = path + ": added_tokens_decoder." + key;
    char* end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) return invalid_argument(label + ": bad id");
    ASSIGN_OR_RETURN(AddedToken token, parse_added_token(value, label, false));
    token.id = static_cast<int32_t>(id);
    tokens.push_back(std::move(token));
  }
  std::sort(tokens.begin(), tokens.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  return std::optional<std::vector<AddedToken>>(std::move(tokens));
}

}  // namespace mmserve::text::hf
