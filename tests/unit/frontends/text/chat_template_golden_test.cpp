// Conformance of the chat-template interpreter against goldens made by the reference, never by this code:
//  - goldens.json: 21 real templates (tests/fixtures/chat_templates/templates/, PROVENANCE in templates.json)
//    over 12 conversations with and without a generation prompt, rendered by HF transformers 5.17.0's own
//    apply_chat_template on the GPU host (identical to local jinja2 3.1.6 configured as transformers 5);
//  - goldens_extra.json: 81 more real templates (templates_extra/), rendered by local jinja2 3.1.6 configured
//    as transformers 5 (not re-run on the GPU host: its device time was spent on the first set);
//  - odd_cases.json: small templates for single features (whitespace control, loop.*, scoping, filters, tests,
//    string methods, number printing, tojson, errors), rendered by jinja2 3.1.6 configured as transformers 5.
// Both by tools/reference/chat_template_goldens.py. A golden that raised must fail here too, with the same
// Python exception name and (for raise_exception and undefined values) the same message.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "frontends/text/chat_template/chat_template.h"
#include "test_paths.h"

namespace mmserve::chat_template {
namespace {

using json = nlohmann::ordered_json;

const std::string kDir = std::string(MMSERVE_FIXTURES_DIR) + "/chat_templates/";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::string& path) {
  return json::parse(read(path));
}

// The goldens pin the clock at 2026-12-02 12:00:00 local time.
std::time_t pinned_now() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 11;
  tm.tm_mday = 2;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// The error message without the " (line L, column C)" we add to runtime errors.
std::string without_location(const std::string& m) {
  const size_t at = m.rfind(" (line ");
  return at == std::string::npos ? m : m.substr(0, at);
}

// Checks one rendering against a golden record {output} or {error_type, error}; returns "" or a description.
std::string check(const StatusOr<std::string>& got, const json& golden) {
  if (golden.contains("output")) {
    if (!got.ok()) return "expected output " + golden["output"].dump() + ", got error: " + got.status().message();
    if (*got != golden["output"].get<std::string>()) {
      return "expected " + golden["output"].dump() + "\n     got " + json(*got).dump();
    }
    return "";
  }
  const std::string want = golden["error_type"].get<std::string>() + ": " + golden["error"].get<std::string>();
  if (got.ok()) return "expected error \"" + want + "\", got output " + json(*got).dump();
  const std::string message = without_location(got.status().message());
  if (message != want) return "expected error \"" + want + "\"\n           got \"" + got.status().message() + "\"";
  return "";
}

// Renders every golden of a set ("" or "_extra") and reports each mismatch; returns the number that passed.
int run_set(const std::string& suffix, size_t expected_min) {
  const json meta = read_json(kDir + "templates" + suffix + ".json");
  const json doc = read_json(kDir + "goldens" + suffix + ".json");
  EXPECT_GE(doc["goldens"].size(), expected_min);
  std::map<std::string, ChatTemplate> compiled;
  for (auto it = meta.begin(); it != meta.end(); ++it) {
    auto t = ChatTemplate::compile(read(kDir + "templates" + suffix + "/" + it.key() + ".jinja"));
    EXPECT_TRUE(t.ok()) << it.key() << ": " << t.status().message();
    if (t.ok()) compiled.emplace(it.key(), std::move(t).value());
  }
  // The conversations, as the script has them (it writes cases.json with --odd-cases).
  const json cases = read_json(kDir + "cases.json");
  int passed = 0, failed = 0;
  for (const json& g : doc["goldens"]) {
    const std::string name = g["template"].get<std::string>();
    if (!compiled.count(name)) {
      ++failed;
      continue;
    }
    const json& m = meta[name];
    RenderOptions o;
    o.add_generation_prompt = g["add_generation_prompt"].get<bool>();
    o.bos_token = m["bos_token"].is_string() ? m["bos_token"].get<std::string>() : "";
    o.eos_token = m["eos_token"].is_string() ? m["eos_token"].get<std::string>() : "";
    o.now = pinned_now();
    for (auto it = g["kwargs"].begin(); it != g["kwargs"].end(); ++it) {
      if (it.key() == "tools") {
        o.tools = it.value();
      } else {
        o.extra[it.key()] = it.value();
      }
    }
    const std::string problem = check(compiled.at(name).render(cases[g["case"].get<std::string>()], o), g);
    if (problem.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << name << " / " << g["case"].get<std::string>()
                    << " / add_generation_prompt=" << o.add_generation_prompt << " / kwargs=" << g["kwargs"].dump()
                    << ":\n  " << problem;
    }
  }
  std::printf("goldens%s: %d passed, %d failed\n", suffix.c_str(), passed, failed);
  return passed;
}

// 21 templates, goldens by transformers 5.17.0's apply_chat_template on the GPU host.
TEST(ChatTemplateGolden, RealTemplatesMatchTransformers) {
  run_set("", 480);
}

// 81 more templates (every distinct one in @huggingface/ollama-utils: Llama 3.1 with tools and builtin tools, Llama 4,
// Mistral Small/Large, DeepSeek R1/V3, QwQ, Qwen3-Coder, Phi-4, Granite 3.3/4, Command R/R7B, ...), goldens by the
// local jinja2 3.1.6 configured as transformers 5 (the same jinja2 as the GPU host's, which agreed on every golden of
// the first set).
TEST(ChatTemplateGolden, MoreTemplatesMatchJinja2) {
  run_set("_extra", 680);
}

// MMSERVE_CHAT_TEMPLATE_CASES=FILE runs another case file of the same format instead (e.g. randomly generated
// expressions rendered by jinja2, for differential testing by hand).
TEST(ChatTemplateGolden, OddCasesMatchJinja2) {
  const char* other = std::getenv("MMSERVE_CHAT_TEMPLATE_CASES");
  const json doc = read_json(other ? std::string(other) : kDir + "odd_cases.json");
  ASSERT_GE(doc["cases"].size(), 100u);
  int passed = 0, failed = 0;
  for (const json& c : doc["cases"]) {
    const std::string source = c["template"].get<std::string>();
    StatusOr<std::string> got = [&]() -> StatusOr<std::string> {
      ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::compile(source));
      RenderOptions o;
      o.now = pinned_now();
      o.bos_token = "<s>";
      o.eos_token = "</s>";
      json messages = json::array();
      for (auto it = c["vars"].begin(); it != c["vars"].end(); ++it) {
        if (it.key() == "messages") {
          messages = it.value();
        } else if (it.key() == "tools") {
          o.tools = it.value();
        } else if (it.key() == "add_generation_prompt") {
          o.add_generation_prompt = it.value().get<bool>();
        } else {
          o.extra[it.key()] = it.value();
        }
      }
      return t.render(messages, o);
    }();
    json golden = c;
    if (c.contains("error_type") && c["error_type"] == "TemplateSyntaxError") {
      // Our syntax messages are our own (with line and column); only the failure must agree.
      golden["error"] = got.ok() ? "" : without_location(got.status().message()).substr(21);
    }
    const std::string problem = check(got, golden);
    if (problem.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << "template " << json(source).dump() << " vars " << c["vars"].dump() << ":\n  " << problem;
    }
  }
  std::printf("odd-case goldens: %d passed, %d failed\n", passed, failed);
}

}  // namespace
}  // namespace mmserve::chat_template
