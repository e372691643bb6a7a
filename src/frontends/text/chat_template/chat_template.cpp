// ChatTemplate: compile (lexer + parser) and render (interpreter over HF's variables), and the loader of a
// model directory's template files. Test: tests/unit/frontends/text/chat_template_test.cpp.
#include "frontends/text/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "frontends/text/chat_template/builtins.h"
#include "frontends/text/chat_template/lexer.h"
#include "frontends/text/chat_template/parser.h"

namespace mmserve::chat_template {

StatusOr<ChatTemplate> ChatTemplate::compile(std::string_view source) {
  if (source.size() > kTemplateBytesMax) {
    return invalid_argument("TemplateSyntaxError: the template is " + std::to_string(source.size()) +
                            " bytes, above the limit of " + std::to_string(kTemplateBytesMax));
  }
  ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  ASSIGN_OR_RETURN(Body body, parse(tokens));
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

namespace {

// JSON nested deeper than `levels` (checked before converting, which recurses).
bool too_deep(const nlohmann::ordered_json& j, uint32_t levels) {
  if (!j.is_structured()) return false;
  if (levels == 0) return true;
  for (const auto& item : j) {
    if (too_deep(item, levels - 1)) return true;
  }
  return false;
}

}  // namespace

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, const RenderOptions& options) const {
  if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!options.extra.is_object()) return invalid_argument("extra template arguments must be a JSON object");
  const uint32_t levels = options.limits.value_depth_max;
  if (too_deep(messages, levels) || too_deep(options.tools, levels) || too_deep(options.documents, levels) ||
      too_deep(options.extra, levels)) {
    return invalid_argument("messages, tools, documents or extra arguments nest deeper than " + std::to_string(levels) +
                            " levels");
  }
  // What HF's render passes: globals, then the special tokens, messages/tools/documents/add_generation_prompt,
  // and the caller's keyword arguments over the special tokens.
  Dict vars = make_globals();
  if (options.bos_token) vars.set("bos_token", Value::string(*options.bos_token));
  if (options.eos_token) vars.set("eos_token", Value::string(*options.eos_token));
  vars.set("messages", Value::from_json(messages));
  vars.set("tools", Value::from_json(options.tools));
  vars.set("documents", Value::from_json(options.documents));
  vars.set("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  for (auto it = options.extra.begin(); it != options.extra.end(); ++it)
    vars.set(it.key(), Value::from_json(it.value()));
  Interpreter interpreter(options.limits, options.now.value_or(std::time(nullptr)));
  std::string out;
  RETURN_IF_ERROR(interpreter.render(*body_, std::move(vars), out));
  return out;
}

StatusOr<std::string> ChatTemplate::render_json(std::string_view messages_json, const RenderOptions& options) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return invalid_argument("messages are not valid JSON");
  return render(messages, options);
}

// --- loader -------------------------------------------------------------------------------------------------

namespace {

StatusOr<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<nlohmann::ordered_json> read_json(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path.string() + " is not valid JSON");
  return j;
}

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}; null or absent: none.
std::optional<std::string> special_token(const nlohmann::ordered_json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const auto& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// `chat_template` as a string, or [{"name": ..., "template": ...}, ...]. Appends the names seen to `names`.
StatusOr<std::optional<std::string>> pick(const nlohmann::ordered_json& value, std::string_view name,
                                          const std::string& where, std::vector<std::string>& names) {
  if (value.is_string()) {
    names.emplace_back("default");
    if (name == "default") return std::optional<std::string>(value.get<std::string>());
    return std::optional<std::string>();
  }
  if (!value.is_array())
    return invalid_argument(where + ": chat_template must be a string or a list of {name, template}");
  for (const auto& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
        !entry["template"].is_string()) {
      return invalid_argument(where + ": each chat_template entry needs a string name and template");
    }
    names.push_back(entry["name"].get<std::string>());
    if (entry["name"].get<std::string>() == name)
      return std::optional<std::string>(entry["template"].get<std::string>());
  }
  return std::optional<std::string>();
}

}  // namespace

StatusOr<LoadedChatTemplate> load_chat_template(const std::filesystem::path& dir, std::string_view name) {
  std::error_code ec;
  std::optional<std::string> source;
  std::string origin;
  std::vector<std::string> names;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const auto config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path, ec)) {
    ASSIGN_OR_RETURN(config, read_json(config_path));
    if (!config.is_object()) return invalid_argument(config_path.string() + " is not a JSON object");
  }
  const auto jinja_path = name == "default" ? dir / "chat_template.jinja"
                                            : dir / "additional_chat_templates" / (std::string(name) + ".jinja");
  if (std::filesystem::exists(jinja_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, read_file(jinja_path));
    source = std::move(text);
    origin = jinja_path.string();
  }
  if (!source && config.contains("chat_template")) {
    ASSIGN_OR_RETURN(source, pick(config["chat_template"], name, config_path.string(), names));
    origin = config_path.string() + " (chat_template \"" + std::string(name) + "\")";
  }
  const auto processor_path = dir / "chat_template.json";
  if (!source && std::filesystem::exists(processor_path, ec)) {
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, read_json(processor_path));
    if (!j.is_object() || !j.contains("chat_template")) {
      return invalid_argument(processor_path.string() + " has no chat_template");
    }
    ASSIGN_OR_RETURN(source, pick(j["chat_template"], name, processor_path.string(), names));
    origin = processor_path.string();
  }
  if (!source) {
    if (names.empty())
      return not_found(dir.string() +
                       " has no chat template (chat_template.jinja, tokenizer_config.json or chat_template.json)");
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return not_found(dir.string() + " has no chat template named \"" + std::string(name) + "\" (it has: " + list + ")");
  }
  StatusOr<ChatTemplate> compiled = ChatTemplate::compile(*source);
  if (!compiled.ok()) return compiled.status().with_context(origin);
  return LoadedChatTemplate{std::move(compiled).value(), origin, special_token(config, "bos_token"),
                            special_token(config, "eos_token")};
}

}  // namespace mmserve::chat_template
