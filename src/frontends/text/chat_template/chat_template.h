// Chat templates: renders a conversation with a model's Jinja2 chat template exactly as HF transformers'
// `apply_chat_template(messages, tokenize=False, ...)` does, with an interpreter written for it (lexer.h,
// parser.h, interpreter.h, builtins.h) instead of a Jinja library.
//
//   ASSIGN_OR_RETURN(LoadedChatTemplate t, load_chat_template(model_dir));
//   RenderOptions o;
//   o.add_generation_prompt = true;
//   o.bos_token = t.bos_token;  o.eos_token = t.eos_token;
//   ASSIGN_OR_RETURN(std::string prompt, t.chat_template.render(messages, o));
//
// The template sees what HF passes: messages, tools, documents, add_generation_prompt, bos_token/eos_token and
// any extra keyword arguments, with raise_exception and strftime_now as globals. What is supported and what is
// not: docs/chat_templates.md. Every failure is a Status whose message starts with the Python exception the
// reference raises ("TemplateSyntaxError: ... (line L, column C)", "TemplateError: <raise_exception's message>",
// "UndefinedError: ...", "TypeError: ..."); nothing a template or a conversation holds can crash or hang it.
// Tests: tests/unit/frontends/text/chat_template_test.cpp; fuzz: fuzz/chat_template_fuzz.cpp.
#pragma once

#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "frontends/text/chat_template/ast.h"
#include "frontends/text/chat_template/interpreter.h"

namespace mmserve::chat_template {

struct RenderOptions {
  bool add_generation_prompt = false;
  // HF passes tools and documents always (None when absent). Keep JSON objects ordered (ordered_json): tojson
  // prints keys in their order, as Python does.
  nlohmann::ordered_json tools = nullptr;
  nlohmann::ordered_json documents = nullptr;
  // Extra template keyword arguments (enable_thinking, date_string, ...): a JSON object; they override the
  // special tokens, as in HF.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The tokenizer's special tokens; an absent one is undefined in the template, as when HF's tokenizer has none.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // strftime_now's clock (local time); absent: now. Tests pin it.
  std::optional<std::time_t> now;
  RenderLimits limits;
};

class ChatTemplate {
 public:
  // Parses a template; syntax errors, unknown tags/filters/tests and oversized templates are InvalidArgument.
  static StatusOr<ChatTemplate> compile(std::string_view source);

  // `messages` must be a JSON array (of message objects, as users send them).
  StatusOr<std::string> render(const nlohmann::ordered_json& messages, const RenderOptions& options) const;
  // The same from JSON text (parsed with key order kept).
  StatusOr<std::string> render_json(std::string_view messages_json, const RenderOptions& options) const;

  const std::string& source() const { return *source_; }

 private:
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const Body> body_;
};

constexpr size_t kTemplateBytesMax = 1u << 20;  // real templates are below 64 KiB

// A model directory's template and special tokens.
struct LoadedChatTemplate {
  ChatTemplate chat_template;
  std::string origin;  // the file (and entry) it came from, for messages
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// Finds the template `name` ("default" unless the model names others) in a model directory, in the order
// transformers 5 reads them: chat_template.jinja (or additional_chat_templates/<name>.jinja for another name),
// then tokenizer_config.json's `chat_template` (a string, or a list of {"name", "template"}), then
// chat_template.json's `chat_template` (processors). bos/eos come from tokenizer_config.json (a string or an
// AddedToken object). NotFound when the directory has no template or none of that name (the message lists the
// names there are).
StatusOr<LoadedChatTemplate> load_chat_template(const std::filesystem::path& model_dir,
                                                std::string_view name = "default");

}  // namespace mmserve::chat_template
