// Unit tests of the chat-template library, layer by layer: Python value printing (format_float, repr, json.dumps
// as Python prints them, values checked against CPython by hand), the lexer's positions, every kind of syntax
// error with its exact message, runtime errors, the work/size/depth limits, the render API's variables, and the
// loader's file precedence. Conformance with HF and jinja2 is in chat_template_golden_test.cpp.
#include "frontends/text/chat_template/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "frontends/text/chat_template/lexer.h"

namespace mmserve::chat_template {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

StatusOr<std::string> render(const std::string& source, const json& messages = json::array(), RenderOptions o = {}) {
  ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::compile(source));
  return t.render(messages, o);
}

std::string error_of(const StatusOr<std::string>& r) {
  return r.ok() ? "(no error; output " + json(*r).dump() + ")" : r.status().message();
}

TEST(ChatTemplateValueTest, FloatsPrintAsPythonRepr) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(-2.5), "-2.5");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1e15), "1000000000000000.0");
  EXPECT_EQ(format_float(123456789.125), "123456789.125");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(0.00001), "1e-05");
  EXPECT_EQ(format_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_float(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(format_float(5e-324), "5e-324");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(1.0 / 0.0), "inf");
}

TEST(ChatTemplateValueTest, ReprAndStrFollowPython) {
  EXPECT_EQ(to_str(Value::boolean(true)), "True");
  EXPECT_EQ(to_str(Value::none()), "None");
  EXPECT_EQ(to_str(Value()), "");
  EXPECT_EQ(to_repr(Value::string("it's")), "\"it's\"");
  EXPECT_EQ(to_repr(Value::string("a\"b'c")), "'a\"b\\'c'");
  EXPECT_EQ(to_repr(Value::string("\x01\x7f\xc2\xa0\xe2\x80\x8b")), "'\\x01\\x7f\\xa0\\u200b'");  // NBSP, ZWSP
  EXPECT_EQ(to_repr(Value::list({Value::integer(1)}, true)), "(1,)");
  Dict d;
  d.set("k", Value::list({Value::floating(2.0), Value::none()}));
  EXPECT_EQ(to_str(Value::dict(d)), "{'k': [2.0, None]}");
}

TEST(ChatTemplateValueTest, JsonIsPythonJsonDumps) {
  Dict d;
  d.set("b", Value::string("é\"\\\n\x01\x7f😀"));
  d.set("a", Value::list({Value::floating(1.0), Value::floating(1e20), Value::boolean(false), Value::none()}));
  EXPECT_EQ(*to_json(Value::dict(d), {}), "{\"b\": \"é\\\"\\\\\\n\\u0001\x7f😀\", \"a\": [1.0, 1e+20, false, null]}");
  JsonOptions ascii;
  ascii.ensure_ascii = true;
  ascii.sort_keys = true;
  // ensure_ascii escapes everything outside ' '..'~', DEL included.
  EXPECT_EQ(*to_json(Value::dict(d), ascii),
            "{\"a\": [1.0, 1e+20, false, null], \"b\": \"\\u00e9\\\"\\\\\\n\\u0001\\u007f\\ud83d\\ude00\"}");
  EXPECT_EQ(to_json(Value::undefined("x"), {}).status().message(),
            "TypeError: Object of type Undefined is not JSON serializable");
}

TEST(ChatTemplateLexerTest, PositionsCountLinesAndCodePoints) {
  auto tokens = tokenize("é\n  {{ name }}");
  ASSERT_TRUE(tokens.ok());
  ASSERT_GE(tokens->size(), 4u);
  EXPECT_EQ((*tokens)[1].type, TokenType::kVariableBegin);
  EXPECT_EQ((*tokens)[2].text, "name");
  EXPECT_EQ((*tokens)[2].line, 2);
  EXPECT_EQ((*tokens)[2].column, 6);
}

// Each broken template fails to compile with a message naming the problem and where it is.
TEST(ChatTemplateSyntaxErrorTest, MessagesNameTheProblemAndPosition) {
  const std::pair<const char*, const char*> cases[] = {
      {"{% if x %}unclosed",
       "TemplateSyntaxError: unexpected end of template: expected {% elif %} or {% else %} or {% endif %} to close "
       "the 'if' at line 1, column 4 (line 1, column 19)"},
      {"{% for x in y %}\n{% endif %}", "TemplateSyntaxError: encountered unknown tag 'endif' (line 2, column 4)"},
      {"{{ 1 + }}", "TemplateSyntaxError: unexpected '}}' (line 1, column 8)"},
      {"a\n{% nosuchtag %}", "TemplateSyntaxError: encountered unknown tag 'nosuchtag' (line 2, column 4)"},
      {"{{ 'unterminated }}", "TemplateSyntaxError: unterminated string (line 1, column 4)"},
      {"{# unclosed", "TemplateSyntaxError: missing end of comment tag (line 1, column 1)"},
      {"{{ x", "TemplateSyntaxError: unexpected end of template: this {{ is never closed (line 1, column 1)"},
      {"{{ (1, 2 }}", "TemplateSyntaxError: unexpected '}' (line 1, column 11)"},
      {"{{ 1 ) }}", "TemplateSyntaxError: unexpected ')' (line 1, column 6)"},
      {"{{ a $ b }}", "TemplateSyntaxError: unexpected character '$' (line 1, column 6)"},
      {"{% break %}", "TemplateSyntaxError: 'break' outside of a loop (line 1, column 4)"},
      {"{{ 'a' | nosuch }}", "TemplateSyntaxError: no filter named 'nosuch' (line 1, column 10)"},
      {"{{ 1 is nosuch }}", "TemplateSyntaxError: no test named 'nosuch' (line 1, column 9)"},
      {"{% include 'x.jinja' %}",
       "TemplateSyntaxError: the 'include' tag is not supported in chat templates (line 1, column 4)"},
      {"{% for x in y recursive %}{% endfor %}",
       "TemplateSyntaxError: recursive for loops are not supported (line 1, column 15)"},
      {"{% set %}", "TemplateSyntaxError: expected a name, got '%}' (line 1, column 8)"},
      {"{{ f(*args) }}", "TemplateSyntaxError: *args and **kwargs in calls are not supported (line 1, column 6)"},
      {"{{ 99999999999999999999 }}",
       "TemplateSyntaxError: integer literal too large (beyond 64 bits) (line 1, column 4)"},
      {"{{ '\\ud800' }}", "TemplateSyntaxError: escape is not a valid code point (line 1, column 4)"},
      {"\xff", "TemplateSyntaxError: the template is not valid UTF-8"},
  };
  for (const auto& [source, message] : cases) {
    auto t = ChatTemplate::compile(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << source;
    EXPECT_EQ(t.status().message(), message) << source;
  }
}

TEST(ChatTemplateSyntaxErrorTest, NestingIsBounded) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of(render(deep)).find("nested too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 400; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(render(blocks)).find("nested too deeply"), std::string::npos);
  std::string negs = "{{ " + std::string(3000, '-') + "1 }}";
  EXPECT_NE(error_of(render(negs)).find("nested too deeply"), std::string::npos);
  EXPECT_FALSE(ChatTemplate::compile(std::string(kTemplateBytesMax + 1, 'a')).ok());
}

TEST(ChatTemplateRuntimeErrorTest, RaiseExceptionCarriesItsMessageAlone) {
  const auto r = render("{% if messages|length > 1 %}{{ raise_exception('Only one message, please') }}{% endif %}",
                        json::parse(R"([{"role":"user"},{"role":"user"}])"));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "TemplateError: Only one message, please");
}

TEST(ChatTemplateRuntimeErrorTest, ErrorsSayWhatAndWhere) {
  EXPECT_EQ(error_of(render("line\n{{ messages[0].content.text }}", json::parse(R"([{"role":"user"}])"))),
            "UndefinedError: 'dict object' has no attribute 'content' (line 2, column 23)");
  EXPECT_EQ(error_of(render("{{ 'a' + messages }}")),
            "TypeError: can only concatenate str (not \"list\") to str (line 1, column 8)");
  EXPECT_EQ(error_of(render("{{ messages.append(1) }}")),
            "SecurityError: access to attribute 'append' of 'list' object is unsafe. (line 1, column 19)");
  EXPECT_EQ(error_of(render("{{ 2 ** 64 }}")),
            "OverflowError: integer result beyond 64 bits (Python would use a big integer) (line 1, column 6)");
  EXPECT_EQ(error_of(render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}")),
            "TemplateRuntimeError: storing a namespace (or a container of one) in a namespace is not supported");
}

TEST(ChatTemplateLimitTest, RunawayWorkStopsWithAStatus) {
  RenderOptions o;
  o.limits.steps_max = 100'000;
  auto r = render("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}", json::array(), o);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "RuntimeError: the template did more than 100000 steps (a runaway loop?)");
  // Quadratic copying is work too.
  r = render(
      "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ "
      "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' %}{% endfor %}",
      json::array(), o);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(ChatTemplateLimitTest, RecursionOutputAndDepthAreBounded) {
  auto r = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(), "RecursionError: macro calls nested deeper than 100 (line 1, column 21)");
  RenderOptions o;
  o.limits.output_bytes_max = 1000;
  r = render("{% for i in range(100) %}0123456789ab{% endfor %}", json::array(), o);
  EXPECT_EQ(r.status().code(), StatusCode::kTooLarge);
  r = render("{{ 'x' * 100000 }}", json::array(), o);
  EXPECT_EQ(r.status().code(), StatusCode::kTooLarge);
  r = render("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}{% endfor %}");
  EXPECT_NE(error_of(r).find("RecursionError: a value nested deeper than 256 levels"), std::string::npos);
  json deep = json::array();
  for (int i = 0; i < 300; ++i) deep = json::array({deep});
  r = render("{{ messages|length }}", deep);
  EXPECT_EQ(error_of(r), "messages, tools, documents or extra arguments nest deeper than 256 levels");
}

TEST(ChatTemplateRenderApiTest, PassesWhatHfPasses) {
  RenderOptions o;
  o.add_generation_prompt = true;
  o.tools = json::parse(R"([{"name": "f", "z": 1, "a": 2}])");
  o.extra = json::parse(R"({"enable_thinking": false, "eos_token": "<override>"})");
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  EXPECT_EQ(*render("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools | tojson }}|{{ documents }}|"
                    "{{ enable_thinking }}|{{ messages | length }}",
                    json::parse(R"([{"role": "user", "content": "x"}])"), o),
            "<s>|<override>|True|[{\"name\": \"f\", \"z\": 1, \"a\": 2}]|None|False|1");
  // No special token given: undefined, as for a tokenizer without one.
  EXPECT_EQ(*render("{{ bos_token is defined }}{{ bos_token }}"), "False");
  ASSERT_TRUE(ChatTemplate::compile("x").ok());
  const ChatTemplate t = *ChatTemplate::compile("{{ messages[0].content }}");
  EXPECT_EQ(*t.render_json(R"([{"content": "from text"}])", {}), "from text");
  EXPECT_EQ(t.render_json("[{", {}).status().message(), "messages are not valid JSON");
  EXPECT_EQ(t.render(json::object(), {}).status().message(), "messages must be a JSON array");
}

TEST(ChatTemplateRenderApiTest, StrftimeNowUsesTheGivenClock) {
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_isdst = -1;
  o.now = std::mktime(&tm);
  EXPECT_EQ(*render("{{ strftime_now('%d %b %Y') }}", json::array(), o), "26 Jul 2024");
}

// A per-test scratch directory, removed afterwards.
class ChatTemplateLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("mmserve_chat_template_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& content) const {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << content;
  }
  std::string rendered(const LoadedChatTemplate& t) const {
    RenderOptions o;
    o.bos_token = t.bos_token;
    o.eos_token = t.eos_token;
    return *t.chat_template.render(json::array(), o);
  }
  fs::path dir_;
};

TEST_F(ChatTemplateLoaderTest, TokenizerConfigStringWithAddedTokenObjects) {
  write("tokenizer_config.json",
        R"({"chat_template": "{{ bos_token }}A{{ eos_token }}", "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>"})");
  auto t = load_chat_template(dir_);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(rendered(*t), "<s>A</s>");
}

TEST_F(ChatTemplateLoaderTest, NamedListPicksDefaultOrTheNamedOne) {
  write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(rendered(*load_chat_template(dir_)), "D");
  EXPECT_EQ(rendered(*load_chat_template(dir_, "tool_use")), "T");
  auto missing = load_chat_template(dir_, "rag");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            dir_.string() + " has no chat template named \"rag\" (it has: default, tool_use)");
}

TEST_F(ChatTemplateLoaderTest, JinjaFileWinsOverTokenizerConfigThenProcessorJson) {
  write("chat_template.json", R"({"chat_template": "P"})");
  EXPECT_EQ(rendered(*load_chat_template(dir_)), "P");
  write("tokenizer_config.json", R"({"chat_template": "C", "eos_token": "</s>"})");
  EXPECT_EQ(rendered(*load_chat_template(dir_)), "C");
  write("chat_template.jinja", "J{{ eos_token }}\n");  // the trailing newline is dropped, as jinja2 does
  auto t = load_chat_template(dir_);
  EXPECT_EQ(rendered(*t), "J</s>");
  EXPECT_EQ(t->origin, (dir_ / "chat_template.jinja").string());
  write("additional_chat_templates/tool_use.jinja", "TOOLS");
  EXPECT_EQ(rendered(*load_chat_template(dir_, "tool_use")), "TOOLS");
}

TEST_F(ChatTemplateLoaderTest, ErrorsNameTheFile) {
  EXPECT_EQ(load_chat_template(dir_).status().code(), StatusCode::kNotFound);
  write("tokenizer_config.json", "{not json");
  EXPECT_EQ(load_chat_template(dir_).status().message(),
            (dir_ / "tokenizer_config.json").string() + " is not valid JSON");
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_NE(load_chat_template(dir_).status().message().find("must be a string or a list"), std::string::npos);
  write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  EXPECT_EQ(load_chat_template(dir_).status().message(),
            (dir_ / "tokenizer_config.json").string() +
                " (chat_template \"default\"): TemplateSyntaxError: unexpected '%}' (line 1, column 7)");
}

}  // namespace
}  // namespace mmserve::chat_template
