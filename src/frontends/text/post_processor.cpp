// PostProcessor: tokenizers' TemplateProcessing / BertProcessing / RobertaProcessing / ByteLevel / Sequence
// (tokenizers/src/processors/*.rs) as far as ids go (type ids, offsets and attention masks are not kept).
// Tests: tests/unit/frontends/text/hf_tokenizer_test.cpp.
#include "frontends/text/post_processor.h"

#include <climits>
#include <map>
#include <utility>

#include "frontends/text/hf_tokenizer_files.h"

namespace mmserve::text {
namespace {

using nlohmann::json;



// BertProcessing / RobertaProcessing's "sep" / "cls": ["token", id].
StatusOr<int32_t> token_pair_id(const json& j, const char* key, const std::string& label) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string()) {
    return invalid_argument(label + ": \"" + key + "\" must be [\"token\", id]");
  }
  return hf::parse_id((*it)[1], label + ": " + key);
}

using SpecialIds = std::map<std::string, std::vector<int32_t>, std::less<>>;

// One template piece: {"Sequence": {"id": "A"|"B", ...}}, {"SpecialToken": {"id": name, ...}} or a string
// ("$A", "$B", "$", "$0", "$1", "$A:1", "[CLS]", "[CLS]:0").
template <typename Piece>
StatusOr<Piece> parse_piece(const json& j, const SpecialIds& specials, const std::string& label) {
  Piece piece;
  std::string name;
  bool is_sequence = false;
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    if (const size_t colon = s.rfind(':'); colon != std::string::npos && colon > 0) {
      const std::string type_id = s.substr(colon + 1);
      if (!type_id.empty() && type_id.find_first_not_of("0123456789") == std::string::npos) s.resize(colon);
    }
    if (!s.empty() && s[0] == '$') {
      is_sequence = true;
      name = s.substr(1);
      if (name.empty() || name == "0") name = "A";
      if (name == "1") name = "B";
    } else {
      name = s;
    }
  } else if (j.is_object() && j.size() == 1 && (j.contains("Sequence") || j.contains("SpecialToken"))) {
    is_sequence = j.contains("Sequence");
    const json& inner = is_sequence ? j["Sequence"] : j["SpecialToken"];
    const auto id = inner.is_object() ? inner.find("id") : inner.end();
    if (id == inner.end() || !id->is_string()) return invalid_argument(label + ": a piece needs a string \"id\"");
    name = id->get<std::string>();
  } else {
    return invalid_argument(label + ": expected {\"Sequence\": ...}, {\"SpecialToken\": ...} or a string");
  }
  if (is_sequence) {
    if (name != "A" && name != "B") return invalid_argument(label + ": sequence \"" + name + "\" (A or B)");
    piece.sequence = name == "A" ? 0 : 1;
    return piece;
  }
  const auto it = specials.find(name);
  if (it == specials.end())
    return invalid_argument(label + ": special token \"" + name + "\" is not in special_tokens");
  piece.ids = it->second;
  return piece;
}

template <typename Piece>
StatusOr<std::vector<Piece>> parse_template(const json& j, const SpecialIds& specials, const std::string& label) {
  json list = j;
  if (j.is_string()) {  // "[CLS] $A [SEP]"
    list = json::array();
    const std::string s = j.get<std::string>();
    for (size_t pos = 0; pos < s.size();) {
      const size_t start = s.find_first_not_of(' ', pos);
      if (start == std::string::npos) break;
      const size_t end = std::min(s.find(' ', start), s.size());
      list.push_back(s.substr(start, end - start));
      pos = end;
    }
  }
  if (!list.is_array()) return invalid_argument(label + ": expected an array of pieces or a string");
  std::vector<Piece> pieces;
  for (size_t i = 0; i < list.size(); ++i) {
    ASSIGN_OR_RETURN(Piece piece, parse_piece<Piece>(list[i], specials, label + "[" + std::to_string(i) + "]"));
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

}  // namespace

StatusOr<PostProcessor> PostProcessor::from_json(const json& j, const std::string& label) {
  PostProcessor p;
  if (!j.is_null()) RETURN_IF_ERROR(add_from_json(j, label, p));
  return p;
}

Status PostProcessor::add_from_json(const json& j, const std::string& label, PostProcessor& p) {
  const std::string type = hf::component_type(j);
  const auto claim = [&p, &label]() -> Status {
    if (p.has_template_) return unimplemented(label + ": more than one post-processor adding special tokens");
    p.has_template_ = true;
    return ok_status();
  };
  if (type == "Sequence") {
    const auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) return invalid_argument(label + ": Sequence needs \"processors\"");
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(add_from_json((*list)[i], label + "[" + std::to_string(i) + "]", p));
    }
  } else if (type == "ByteLevel") {
    // Offsets only.
  } else if (type == "TemplateProcessing") {
    RETURN_IF_ERROR(claim());
    SpecialIds specials;
    if (const auto map = j.find("special_tokens"); map != j.end() && !map->is_null()) {
      if (!map->is_object()) return invalid_argument(label + ": \"special_tokens\" must be an object");
      for (const auto& [name, value] : map->items()) {
        const std::string where = label + ": special_tokens." + name;
        const auto ids = value.is_object() ? value.find("ids") : value.end();
        if (ids == value.end() || !ids->is_array()) return invalid_argument(where + ": needs an \"ids\" array");
        std::vector<int32_t>& out = specials[name];
        for (const json& id : *ids) {
          ASSIGN_OR_RETURN(const int32_t parsed, hf::parse_id(id, where));
          out.push_back(parsed);
        }
      }
    }
    const auto single = j.find("single");
    const auto pair = j.find("pair");
    if (single == j.end()) return invalid_argument(label + ": TemplateProcessing needs \"single\"");
    ASSIGN_OR_RETURN(p.single_, parse_template<Piece>(*single, specials, label + ": single"));
    if (pair != j.end() && !pair->is_null()) {
      ASSIGN_OR_RETURN(p.pair_, parse_template<Piece>(*pair, specials, label + ": pair"));
    } else {
      p.pair_ = p.single_;  // tokenizers' default pair template appends $B to the single one
      p.pair_.push_back({1, {}});
    }
    for (const Piece& piece : p.single_) {
      if (piece.sequence == 1) return invalid_argument(label + ": the single template uses $B");
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    RETURN_IF_ERROR(claim());
    ASSIGN_OR_RETURN(const int32_t sep, token_pair_id(j, "sep", label));
    ASSIGN_OR_RETURN(const int32_t cls, token_pair_id(j, "cls", label));
    p.single_ = {{-1, {cls}}, {0, {}}, {-1, {sep}}};
    p.pair_ = p.single_;
    if (type == "RobertaProcessing") p.pair_.push_back({-1, {sep}});
    p.pair_.push_back({1, {}});
    p.pair_.push_back({-1, {sep}});
  } else if (type.empty()) {
    return invalid_argument(label + ": a post-processor must be an object with a \"type\"");
  } else {
    return unimplemented(label + ": post-processor type \"" + type + "\" is not supported");
  }
  return ok_status();
}

void PostProcessor::apply(const std::vector<int32_t>& a, const std::vector<int32_t>* b, bool add_special_tokens,
                          std::vector<int32_t>& out) const {
  if (!add_special_tokens || !has_template_) {
    out.insert(out.end(), a.begin(), a.end());
    if (b != nullptr) out.insert(out.end(), b->begin(), b->end());
    return;
  }
  for (const Piece& piece : b == nullptr ? single_ : pair_) {
    if (piece.sequence == 0) {
      out.insert(out.end(), a.begin(), a.end());
    } else if (piece.sequence == 1) {
      if (b != nullptr) out.insert(out.end(), b->begin(), b->end());
    } else {
      out.insert(out.end(), piece.ids.begin(), piece.ids.end());
    }
  }
}

std::vector<int32_t> PostProcessor::special_ids() const {
  std::vector<int32_t> ids;
  for (const auto* list : {&single_, &pair_}) {
    for (const Piece& piece : *list) ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
  }
  return ids;
}

}  // namespace mmserve::text
