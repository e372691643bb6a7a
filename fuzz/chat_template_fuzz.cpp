// libFuzzer target for the chat-template interpreter: arbitrary templates and conversations in, no crash,
// hang or leak out, and the renderer's promises hold.
//
// The first byte picks the mode. Even: the rest is a template source, compiled and rendered over fixed
// conversations (content strings and content parts, tools, a generation prompt or not). Odd: the rest is the
// messages JSON, rendered with the real templates in tests/fixtures/chat_templates/templates (Qwen3,
// Llama 3.2, Mistral Nemo, LLaVA 1.5: the ones with namespaces, tools, reverse loops and string methods).
// Checked on every input: compile and render return (within small limits: 300k steps, 256 KiB output); a
// rendering is valid UTF-8 and no larger than the output limit; every error is InvalidArgument /
// ResourceExhausted / TooLarge / Unimplemented with a message. A broken promise traps.
// The fixture templates are found from $MMSERVE_SOURCE_DIR, else walking up from the executable.
// Run: build/fuzz/fuzz/chat_template_fuzz -max_total_time=60 fuzz/corpus/chat_template_fuzz
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "frontends/text/chat_template/chat_template.h"

namespace {

using mmserve::StatusCode;
using mmserve::chat_template::ChatTemplate;
using mmserve::chat_template::RenderOptions;
using json = nlohmann::ordered_json;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "chat_template_fuzz: broken promise: %s\n", what);
    __builtin_trap();
  }
}

std::filesystem::path templates_dir() {
  if (const char* env = std::getenv("MMSERVE_SOURCE_DIR"))
    return std::filesystem::path(env) / "tests/fixtures/chat_templates/templates";
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    const auto candidate = dir / "tests/fixtures/chat_templates/templates";
    if (std::filesystem::exists(candidate / "qwen3.jinja", ec)) return candidate;
  }
  return "tests/fixtures/chat_templates/templates";
}

const std::vector<ChatTemplate>& real_templates() {
  static const std::vector<ChatTemplate> templates = [] {
    std::vector<ChatTemplate> out;
    for (const char* name : {"qwen3", "llama3_2", "mistral_nemo", "llava1_5"}) {
      std::ifstream in(templates_dir() / (std::string(name) + ".jinja"));
      std::ostringstream ss;
      ss << in.rdbuf();
      auto t = ChatTemplate::compile(ss.str());
      if (!t.ok()) {
        std::fprintf(stderr, "chat_template_fuzz: cannot compile %s: %s (set MMSERVE_SOURCE_DIR)\n", name,
                     t.status().message().c_str());
        std::abort();
      }
      out.push_back(std::move(t).value());
    }
    return out;
  }();
  return templates;
}

const std::vector<json>& conversations() {
  static const std::vector<json> c = {
      json::parse(
          R"([{"role":"system","content":"sys"},{"role":"user","content":"hi é"},{"role":"assistant","content":"<think>a</think>yo"},{"role":"user","content":"q"}])"),
      json::parse(R"([{"role":"user","content":[{"type":"image"},{"type":"text","text":"what?"}]}])"),
      json::parse(
          R"([{"role":"user","content":"w"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x":1}}}]},{"role":"tool","content":"{\"t\": 1}"}])"),
  };
  return c;
}

RenderOptions options(uint8_t mode) {
  RenderOptions o;
  o.add_generation_prompt = (mode & 2) != 0;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.now = 1'780'000'000;
  if (mode & 4) {
    o.tools = json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
  }
  o.extra["enable_thinking"] = (mode & 8) != 0;
  o.limits.steps_max = 300'000;
  o.limits.output_bytes_max = 256 << 10;
  return o;
}

void check_result(const mmserve::StatusOr<std::string>& r, const RenderOptions& o) {
  if (r.ok()) {
    check(r->size() <= o.limits.output_bytes_max, "output within its limit");
    check(mmserve::chat_template::is_valid_utf8(*r), "output is valid UTF-8");
    return;
  }
  const StatusCode c = r.status().code();
  check(c == StatusCode::kInvalidArgument || c == StatusCode::kResourceExhausted || c == StatusCode::kTooLarge ||
            c == StatusCode::kUnimplemented,
        "errors are the user's (invalid, too much work, too large, unsupported)");
  check(!r.status().message().empty(), "errors have a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (64 << 10)) return 0;
  const uint8_t mode = data[0];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const RenderOptions o = options(mode);
  if ((mode & 1) == 0) {
    auto t = ChatTemplate::compile(text);
    if (!t.ok()) {
      check(t.status().code() == StatusCode::kInvalidArgument, "compile errors are InvalidArgument");
      return 0;
    }
    const json& messages = conversations()[(mode >> 4) % conversations().size()];
    check_result(t->render(messages, o), o);
    return 0;
  }
  const json messages = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) return 0;
  const auto& templates = real_templates();
  check_result(templates[(mode >> 4) % templates.size()].render(messages, o), o);
  return 0;
}
