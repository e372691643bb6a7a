// End-to-end tests of the generation routes as deployed: the real `mmserve serve` on a free port with llama2.c's
// real stories260K (converted by `mmserve convert-llama2c`, Llama 2's chat template beside it) and the tiny CLIP
// fixture, driven over HTTP with httplib (curl-like requests and raw server-sent events). Covers: logprobs on
// /v1/completions and /v1/chat/completions (greedy picks the top-1 token at every step; the chosen token's logprob
// equals its entry in top_logprobs; top_logprobs sorted; bytes are the token's UTF-8; streamed chunks carry the
// same tokens as the whole answer), n choices (indices, summed usage, seed + i, interleaved streams ending each
// choice and [DONE] once), the KServe generate extension (whole, stream, versions, errors in KServe's shape) and
// every malformed body getting a 400 with a JSON message.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <httplib.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../conformance/golden.h"
#include "server_process.h"
#include "test_paths.h"

namespace mmserve {
namespace {

using nlohmann::json;
using namespace e2e;

constexpr const char* kLlm = "stories";
constexpr const char* kClip = "clip";
constexpr const char* kLlava = "llava";
constexpr const char* kMixtral = "mixtral";

// One server for the whole suite (a conversion and a model load per test would dominate the run).
class Generate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("mmserve_e2e_generate_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_ / kClip);
    for (const auto& e : fs::directory_iterator(fs::path(MMSERVE_FIXTURES_DIR) / "clip-tiny-quickgelu-f32")) {
      fs::copy_file(fs::canonical(e.path()), *root_ / kClip / e.path().filename());
    }
    const std::string src = MMSERVE_SOURCE_DIR;
    const std::string convert = mmserve_binary() + " convert-llama2c --checkpoint " + src +
                                "/assets/llama2c/stories260K.bin --tokenizer " + src +
                                "/assets/llama2c/tok512.bin --output " + (*root_ / kLlm).string() + " 2>/dev/null";
    ASSERT_EQ(std::system(convert.c_str()), 0) << convert;
    fs::copy_file(fs::path(MMSERVE_FIXTURES_DIR) / "chat_templates/templates/llama2.jinja",
                  *root_ / kLlm / "chat_template.jinja");
    // The tiny HF LLaVA (tests/fixtures/llava) made servable by llava_servable's tokenizer and chat template.
    fs::create_directories(*root_ / kLlava);
    const fs::path fx = MMSERVE_FIXTURES_DIR;
    for (const char* f : {"config.json", "model.safetensors", "preprocessor_config.json"}) {
      fs::copy_file(fx / "llava/llava-llama-f32" / f, *root_ / kLlava / f);
    }
    for (const char* f : {"tokenizer.json", "chat_template.jinja"}) {
      fs::copy_file(fx / "llava_servable" / f, *root_ / kLlava / f);
    }
    // A tiny HF Mixtral (tests/fixtures/mixtral) with the same 256-id tokenizer.
    fs::create_directories(*root_ / kMixtral);
    for (const char* f : {"config.json", "model.safetensors"}) {
      fs::copy_file(fx / "mixtral/mixtral-5x-top2-f32" / f, *root_ / kMixtral / f);
    }
    fs::copy_file(fx / "llava_servable/tokenizer.json", *root_ / kMixtral / "tokenizer.json");
    server_ = new ServerProcess(*root_);
    ASSERT_TRUE(server_->wait_ready()) << server_->stderr_text();
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove_all(*root_);
    delete root_;
  }

  static httplib::Result post(const std::string& path, const json& body) {
    return server_->client().Post(path, body.dump(), "application/json");
  }
  static json post_ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r) << path;
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
  }
  // The `data:` payloads of a server-sent event stream, "[DONE]" included as a string.
  static std::vector<json> events(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    std::vector<json> out;
    if (!r) return out;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
    size_t at = 0;
    for (size_t end; (end = r->body.find("\n\n", at)) != std::string::npos; at = end + 2) {
      const std::string event = r->body.substr(at, end - at);
      EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
      const std::string data = event.substr(6);
      out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data, nullptr, false));
    }
    EXPECT_EQ(at, r->body.size()) << "a partial event at the end";
    return out;
  }

  static fs::path* root_;
  static ServerProcess* server_;
};
fs::path* Generate::root_ = nullptr;
ServerProcess* Generate::server_ = nullptr;

// Completions' top_logprobs object in the order the bytes list it (nlohmann's json would sort the keys).
std::vector<std::pair<std::string, double>> ordered_top(const std::string& body, size_t choice, size_t step) {
  const auto j = nlohmann::ordered_json::parse(body);
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [k, v] : j["choices"][choice]["logprobs"]["top_logprobs"][step].items()) {
    out.emplace_back(k, v.get<double>());
  }
  return out;
}

TEST_F(Generate, GreedyCompletionPicksTheTopTokenAtEveryStep) {
  const json body = {{"model", kLlm}, {"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0},
                     {"logprobs", 5}};
  auto r = post("/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& lp = j["choices"][0]["logprobs"];
  const size_t steps = lp["tokens"].size();
  ASSERT_EQ(steps, static_cast<size_t>(j["usage"]["completion_tokens"].get<int>()));
  ASSERT_EQ(lp["token_logprobs"].size(), steps);
  ASSERT_EQ(lp["top_logprobs"].size(), steps);
  ASSERT_EQ(lp["text_offset"].size(), steps);
  std::string joined;
  for (size_t i = 0; i < steps; ++i) {
    const std::string token = lp["tokens"][i];
    const double chosen = lp["token_logprobs"][i];
    const auto top = ordered_top(r->body, 0, i);
    ASSERT_GE(top.size(), 1u);
    ASSERT_LE(top.size(), 6u);  // N, plus the sampled token when it is not among them
    EXPECT_EQ(top[0].first, token) << "step " << i << ": greedy must pick the most likely token";
    EXPECT_EQ(top[0].second, chosen) << "step " << i;
    for (size_t k = 1; k < top.size(); ++k) EXPECT_GE(top[k - 1].second, top[k].second) << "step " << i;
    EXPECT_LE(chosen, 0.0);
    EXPECT_EQ(lp["text_offset"][i].get<int64_t>(), static_cast<int64_t>(joined.size())) << "ASCII story";
    joined += token;
  }
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind(", there was a little girl", 0), 0u);
  // logprobs: 0 gives the sampled token alone.
  const json zero = post_ok("/v1/completions", {{"model", kLlm}, {"prompt", "Once"}, {"max_tokens", 3},
                                                {"temperature", 0}, {"logprobs", 0}});
  for (const json& top : zero["choices"][0]["logprobs"]["top_logprobs"]) EXPECT_EQ(top.size(), 1u) << zero;
}

TEST_F(Generate, ChatLogprobsCarryBytesAndSortedAlternatives) {
  const json body = {{"model", kLlm},        {"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                     {"max_tokens", 20},     {"temperature", 0},
                     {"logprobs", true},     {"top_logprobs", 3}};
  const json j = post_ok("/v1/chat/completions", body);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), static_cast<size_t>(j["usage"]["completion_tokens"].get<int>()));
  for (const json& step : content) {
    const std::string token = step["token"];
    std::vector<int> bytes(token.begin(), token.end());
    for (int& b : bytes) b &= 0xFF;
    EXPECT_EQ(step["bytes"], json(bytes));
    ASSERT_EQ(step["top_logprobs"].size(), 3u);
    EXPECT_EQ(step["top_logprobs"][0]["token"], step["token"]) << step;
    EXPECT_EQ(step["top_logprobs"][0]["logprob"], step["logprob"]);
    for (size_t k = 1; k < 3; ++k) {
      EXPECT_GE(step["top_logprobs"][k - 1]["logprob"].get<double>(), step["top_logprobs"][k]["logprob"].get<double>());
    }
  }
  // logprobs: true alone gives no alternatives; without it, null.
  json alone = body;
  alone.erase("top_logprobs");
  EXPECT_TRUE(post_ok("/v1/chat/completions", alone)["choices"][0]["logprobs"]["content"][0]["top_logprobs"].empty());
  alone["logprobs"] = false;
  EXPECT_TRUE(post_ok("/v1/chat/completions", alone)["choices"][0]["logprobs"].is_null());
}

TEST_F(Generate, StreamedLogprobsAreTheWholeAnswers) {
  const json body = {{"model", kLlm}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0},
                     {"logprobs", 2}, {"stop", "girl"}};
  const json whole = post_ok("/v1/completions", body);
  json streamed = body;
  streamed["stream"] = true;
  json tokens = json::array(), offsets = json::array();
  std::string text;
  for (const json& e : events("/v1/completions", streamed)) {
    if (e == "[DONE]") continue;
    const json& c = e["choices"][0];
    text += c["text"].get<std::string>();
    if (c["logprobs"].is_null()) continue;
    for (const json& t : c["logprobs"]["tokens"]) tokens.push_back(t);
    for (const json& o : c["logprobs"]["text_offset"]) offsets.push_back(o);
  }
  // The streamed text is the whole one, but for the start of a stop string the engine streamed before it knew
  // ("gir" of "girl" here: a stop string split over tokens; see StreamedTextHoldsBackAStopStringsPrefix).
  EXPECT_EQ(text.rfind(whole["choices"][0]["text"].get<std::string>(), 0), 0u) << text;
  EXPECT_EQ(tokens, whole["choices"][0]["logprobs"]["tokens"]);  // the stop string's tokens too
  EXPECT_EQ(offsets, whole["choices"][0]["logprobs"]["text_offset"]);
  // Chat streams carry content lists.
  const json chat = {{"model", kLlm},  {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 8},
                     {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 1}, {"stream", true}};
  size_t steps = 0;
  for (const json& e : events("/v1/chat/completions", chat)) {
    if (e == "[DONE]" || e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
    steps += e["choices"][0]["logprobs"]["content"].size();
  }
  EXPECT_EQ(steps, 8u);
}

// /metrics (the Prometheus text a scrape reads) has the decoder engine's gauges and the prefix cache's counters once
// a generation ran: two requests with the same 40-token prompt, so the second finds the first's blocks cached.
TEST_F(Generate, MetricsShowTheEngineAndThePrefixCache) {
  std::vector<int> ids = {1};
  for (int i = 0; i < 40; ++i) ids.push_back(10 + i);
  for (int round = 0; round < 2; ++round) {
    post_ok("/v1/completions", {{"model", kLlm}, {"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}});
  }
  std::string text;
  for (int i = 0; i < 100; ++i) {  // published between steps and after each batch: give the engine thread a moment
    auto r = server_->client().Get("/metrics");
    ASSERT_TRUE(r);
    text = r->body;
    if (text.find("mmserve_cache_hits_total{model=\"stories\",cache=\"prefix\"} 0") == std::string::npos &&
        text.find("mmserve_cache_hits_total{model=\"stories\",cache=\"prefix\"}") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const char* name : {"mmserve_num_requests_running{model=\"stories\"}", "mmserve_num_requests_waiting{model=\"stories\"}",
                           "mmserve_num_preemptions_total{model=\"stories\"}", "mmserve_kv_cache_usage_ratio{model=\"stories\"}",
                           "mmserve_cache_misses_total{model=\"stories\",cache=\"prefix\"}"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  const std::string hits = "mmserve_cache_hits_total{model=\"stories\",cache=\"prefix\"} ";
  const size_t at = text.find(hits);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(text.substr(at + hits.size())), 2.0) << "the second request reused the first's two full blocks";
}

// A generation's Server-Timing header carries the decoder's spans: prefill (joining the batch -> the first token)
// and decode (-> the last), beside queue / preprocess / compute / total.
TEST_F(Generate, ServerTimingHasPrefillAndDecodeSpans) {
  for (const std::string& path : std::vector<std::string>{"/v1/completions", "/v2/models/" + std::string(kLlm) + "/generate"}) {
    const json body = path[1] == 'v' && path[2] == '1'
                          ? json{{"model", kLlm}, {"prompt", "Once upon a time"}, {"max_tokens", 8}}
                          : json{{"text_input", "Once upon a time"}, {"max_tokens", 8}};
    auto r = post(path, body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string timing = r->get_header_value("Server-Timing");
    for (const char* span : {"queue;dur=", "prefill;dur=", "decode;dur=", "total;dur="}) {
      EXPECT_NE(timing.find(span), std::string::npos) << path << ": " << timing;
    }
  }
}

// A stop string split over several tokens ("gir" before "l" completes "girl"): the engine holds back the text a
// stop string may still claim, so the streamed text is exactly the whole answer.
TEST_F(Generate, StreamedTextHoldsBackAStopStringsPrefix) {
  const json body = {{"model", kLlm}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0},
                     {"stop", "girl"}};
  const json whole = post_ok("/v1/completions", body);
  json streamed = body;
  streamed["stream"] = true;
  std::string text;
  for (const json& e : events("/v1/completions", streamed)) {
    if (e != "[DONE]") text += e["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
}

TEST_F(Generate, NChoicesAreSeededAndSummed) {
  const json body = {{"model", kLlm},    {"prompt", "Once upon a time"}, {"max_tokens", 12},
                     {"temperature", 1.2}, {"n", 3},                    {"seed", 40}};
  const json j = post_ok("/v1/completions", body);
  ASSERT_EQ(j["choices"].size(), 3u);
  int64_t generated = 0;
  std::set<std::string> texts;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    texts.insert(j["choices"][i]["text"].get<std::string>());
    // Choice i is the n = 1 request with seed + i.
    json one = body;
    one["n"] = 1;
    one["seed"] = 40 + static_cast<int>(i);
    const json single = post_ok("/v1/completions", one);
    EXPECT_EQ(single["choices"][0]["text"], j["choices"][i]["text"]) << i;
    generated += single["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_GT(texts.size(), 1u) << "three seeds gave one text";
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);  // once, as OpenAI counts it
  EXPECT_EQ(j["usage"]["completion_tokens"], generated);
  const json again = post_ok("/v1/completions", body);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again["choices"][i]["text"], j["choices"][i]["text"]) << "not reproducible";
}

TEST_F(Generate, NChoicesStreamInterleavedAndEndOnce) {
  const json body = {{"model", kLlm},  {"prompt", "Once upon a time"}, {"max_tokens", 10}, {"temperature", 0},
                     {"n", 3},         {"stream", true}, {"stream_options", {{"include_usage", true}}},
                     {"best_of", 3}};
  const std::vector<json> ev = events("/v1/completions", body);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), "[DONE]");
  std::map<int, std::string> text;
  std::map<int, int> finishes;
  int usage_chunks = 0, done = 0;
  for (size_t k = 0; k < ev.size(); ++k) {
    if (ev[k] == "[DONE]") {
      ++done;
      continue;
    }
    if (ev[k].contains("usage")) {
      ++usage_chunks;
      EXPECT_EQ(ev[k]["usage"]["completion_tokens"], 30);
      EXPECT_EQ(ev[k]["usage"]["prompt_tokens"], 5);
      EXPECT_EQ(k + 2, ev.size()) << "usage comes last, before [DONE]";
      continue;
    }
    const json& c = ev[k]["choices"][0];
    const int index = c["index"];
    EXPECT_EQ(finishes[index], 0) << "choice " << index << " sent after its finish";
    text[index] += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(done, 1);
  EXPECT_EQ(usage_chunks, 1);
  ASSERT_EQ(text.size(), 3u);
  const std::string whole =
      post_ok("/v1/completions", {{"model", kLlm}, {"prompt", "Once upon a time"}, {"max_tokens", 10},
                                  {"temperature", 0}})["choices"][0]["text"];
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(finishes[i], 1) << i;
    EXPECT_EQ(text[i], whole) << i;  // greedy: every choice is the same story
  }
}

TEST_F(Generate, AClientThatLeavesCancelsEveryChoice) {
  // A raw socket: the request, the first bytes of the stream, then close. The server must stay healthy and answer
  // the next request at once (the four long sequences do not keep the instance busy).
  const int fd = connect_to(server_->port());
  ASSERT_GE(fd, 0);
  const std::string body = json{{"model", kLlm}, {"prompt", [] { return std::vector<int>{1}; }()},
                                {"max_tokens", 400}, {"ignore_eos", true}, {"n", 4}, {"stream", true}}
                               .dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  char buf[256];
  ASSERT_GT(::recv(fd, buf, sizeof buf, 0), 0);
  ::close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  post_ok("/v1/completions", {{"model", kLlm}, {"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
}

TEST_F(Generate, KserveGenerateAnswersAsTritonAndMatchesCompletions) {
  const json completion = post_ok("/v1/completions", {{"model", kLlm}, {"prompt", "Once upon a time"},
                                                      {"max_tokens", 16}, {"temperature", 0}});
  const json g = post_ok(std::string("/v2/models/") + kLlm + "/generate",
                         {{"text_input", "Once upon a time"}, {"max_tokens", 16}, {"parameters", {{"temperature", 0}}}});
  EXPECT_EQ(g["model_name"], kLlm);
  EXPECT_EQ(g["model_version"], "1");
  EXPECT_EQ(g["text_output"], completion["choices"][0]["text"]);
  EXPECT_EQ(g["finish_reason"], "length");
  EXPECT_EQ(g["prompt_tokens"], 5);
  EXPECT_EQ(g["completion_tokens"], 16);
  const json v1 = post_ok(std::string("/v2/models/") + kLlm + "/versions/1/generate",
                          {{"text_input", "Once upon a time"}, {"parameters", {{"max_tokens", 16}, {"temperature", 0}}}});
  EXPECT_EQ(v1["text_output"], g["text_output"]);
  std::string streamed;
  const std::vector<json> ev = events(std::string("/v2/models/") + kLlm + "/generate_stream",
                                      {{"text_input", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0},
                                       {"stream", true}});
  ASSERT_GE(ev.size(), 2u);
  for (const json& e : ev) {
    EXPECT_EQ(e["model_name"], kLlm);
    streamed += e["text_output"].get<std::string>();
  }
  EXPECT_EQ(streamed, g["text_output"]);
  EXPECT_EQ(ev.back()["finish_reason"], "length");
  EXPECT_EQ(ev.back()["completion_tokens"], 16);
  EXPECT_EQ(events(std::string("/v2/models/") + kLlm + "/versions/1/generate_stream",
                   {{"text_input", "Once"}, {"max_tokens", 3}, {"parameters", {{"stop", "."}}}})
                .back()["completion_tokens"],
            3);
}

// A LLaVA served: an OpenAI chat with an image_url data URL and KServe generate with an "image" input give the
// tokens `mmserve generate --image` gives (which reproduces HF's greedy ids: tests/e2e/cli_test.cpp), and image
// mistakes are 400s with a message.
TEST_F(Generate, ImagesThroughChatAndKserveGiveTheClisTokens) {
  const fs::path chelsea = fs::path(MMSERVE_FIXTURES_DIR) / "images/chelsea.png";
  const std::string url = "data:image/png;base64," + base64(read_file(chelsea));
  const json chat = {{"model", kLlava},
                     {"messages", {{{"role", "user"},
                                    {"content", {{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                                 {{"type", "text"}, {"text", "hi"}}}}}}},
                     {"temperature", 0}, {"max_tokens", 6}, {"ignore_eos", true}};
  const json a = post_ok("/v1/chat/completions", chat);
  ASSERT_TRUE(a.contains("choices")) << a.dump();
  ASSERT_EQ(a["usage"]["completion_tokens"], 6);
  // The CLI's --prompt takes the newlines literally: render them with printf first.
  const std::string cmd = "p=$(printf 'USER: <image>\nhi\nASSISTANT:'); " + mmserve_binary() + " generate --model " +
                          (*root_ / kLlava).string() + " --prompt \"$p\" --image " + chelsea.string() +
                          " --temperature 0 --max-new-tokens 6 --ignore-eos 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  const json cli = json::parse(out);
  // The text of the same ids (HF's decode; bytes that are no UTF-8 become U+FFFD on both sides).
  EXPECT_EQ(a["choices"][0]["message"]["content"], cli["text"]);
  EXPECT_EQ(cli["ids"].size(), 6u);
  EXPECT_FALSE(cli["text"].get<std::string>().empty());
  EXPECT_EQ(a["usage"]["prompt_tokens"], cli["prompt_ids"].size());
  // KServe generate with the chat's rendered prompt and the image.
  const json k = post_ok("/v2/models/llava/generate", {{"text_input", "USER: <image>\nhi\nASSISTANT:"},
                                                        {"image", url},
                                                        {"temperature", 0},
                                                        {"max_tokens", 6},
                                                        {"ignore_eos", true}});
  EXPECT_EQ(k["text_output"], a["choices"][0]["message"]["content"]);
  EXPECT_EQ(k["prompt_tokens"], a["usage"]["prompt_tokens"]);
  // The same image came three times (chat, KServe; the CLI is its own process): the encoder cache answered the
  // second, and says so in /metrics.
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    auto m = server_->client().Get("/metrics");
    ASSERT_TRUE(m);
    metrics = m->body;
    if (metrics.find("mmserve_cache_hits_total{model=\"llava\",cache=\"llava_encoder\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(metrics.find("mmserve_cache_hits_total{model=\"llava\",cache=\"llava_encoder\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("mmserve_cache_misses_total{model=\"llava\",cache=\"llava_encoder\"} 1"), std::string::npos);
  // Mistakes: more placeholders than images, an image for a text-only model, a broken data URL, a URL, bytes that
  // are no image.
  auto image_chat = [](const std::string& image) {
    const json part = {{"type", "image_url"}, {"image_url", {{"url", image}}}};
    return json{{"model", kLlava}, {"messages", {{{"role", "user"}, {"content", {part}}}}}};
  };
  struct Bad {
    std::string path;
    json body;
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {"/v2/models/llava/generate", {{"text_input", "<image><image>"}, {"image", url}}, "placeholder"},
      {"/v2/models/stories/generate", {{"text_input", "<image> a"}, {"image", url}}, "takes no images"},
      {"/v2/models/llava/generate", {{"text_input", "<image>"}, {"image", "data:image/png;base64,***"}}, "image"},
      {"/v1/chat/completions", image_chat("http://10.1.1.1/a.png"), "URL fetches are disabled"},
      {"/v1/chat/completions", image_chat("data:image/png;base64,aGVsbG8="), "image"}};
  for (const Bad& b : bad) {
    auto r = post(b.path, b.body);
    ASSERT_TRUE(r) << b.path;
    EXPECT_EQ(r->status, 400) << b.body.dump() << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(r->body.find(b.needle), std::string::npos) << r->body;
  }
}

// SPEC 4.4's routing trace: with x-mmserve-trace-routing: 1 a Mixtral's answer carries, per generated token and
// layer, the experts HF's router chose and their weights (tests/fixtures/mixtral's goldens: the routing of the
// position whose logits picked each token); without the header there is none; the expert-load metrics count
// every routed token.
TEST_F(Generate, MixtralRoutingTraceIsHfsRouterAndTheMetricsCountIt) {
  const fs::path dir = fs::path(MMSERVE_FIXTURES_DIR) / "mixtral/mixtral-5x-top2-f32";
  const json meta = json::parse(read_file(dir / "golden.json"));
  testing::Golden golden((dir / "golden.safetensors").string());
  const std::vector<int64_t> topk = golden.i64("router_topk");
  const std::vector<float> weights = golden.f32("router_weights");
  const std::vector<int64_t> greedy = meta["greedy_ids"].get<std::vector<int64_t>>();
  const int64_t p = static_cast<int64_t>(meta["prompt_ids"].size()), n = static_cast<int64_t>(greedy.size());
  const int64_t fed = p + n - 1, k = 2, layers = 2;
  const json body = {{"model", kMixtral}, {"prompt", meta["prompt_ids"]}, {"max_tokens", n}, {"temperature", 0},
                     {"ignore_eos", true}};
  auto r = server_->client().Post("/v1/completions", {{"x-mmserve-trace-routing", "1"}}, body.dump(),
                                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  const json& routing = j["choices"][0]["routing"];
  ASSERT_EQ(routing["layers"], layers);
  ASSERT_EQ(routing["top_k"], k);
  ASSERT_EQ(static_cast<int64_t>(routing["experts"].size()), n);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t e = 0; e < k; ++e) {
        const size_t at = static_cast<size_t>((l * fed + p - 1 + t) * k + e);
        EXPECT_EQ(routing["experts"][t][l][e].get<int64_t>(), topk[at]) << t << " " << l << " " << e;
        EXPECT_NEAR(routing["weights"][t][l][e].get<double>(), weights[at], 1e-5);
      }
    }
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], n);
  // The request's span (its access-log line, with the trace id) carries the same trace.
  json logged;
  for (int i = 0; i < 100 && logged.is_null(); ++i) {
    std::istringstream log(server_->access_log());
    for (std::string line; std::getline(log, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.contains("routing")) logged = e;
    }
    if (logged.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(logged.is_null()) << "no access-log line with a routing trace";
  EXPECT_EQ(logged["routing"], routing);
  EXPECT_EQ(logged["trace_id"].get<std::string>().size(), 32u);
  // Streamed, the last chunk of the choice carries the same trace, and so does the stream's span (its log line,
  // found by the trace id the request brought).
  json streamed_body = body;
  streamed_body["stream"] = true;
  const std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  auto streamed = server_->client().Post(
      "/v1/completions",
      {{"x-mmserve-trace-routing", "1"}, {"traceparent", "00-" + trace_id + "-00f067aa0ba902b7-01"}},
      streamed_body.dump(), "application/json");
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  json streamed_routing;
  std::istringstream events(streamed->body);
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json chunk = json::parse(line.substr(6));
    if (!chunk["choices"].empty() && chunk["choices"][0].contains("routing")) {
      streamed_routing = chunk["choices"][0]["routing"];
    }
  }
  EXPECT_EQ(streamed_routing, routing) << streamed->body;
  json stream_logged;
  for (int i = 0; i < 100 && stream_logged.is_null(); ++i) {
    std::istringstream log(server_->access_log());
    for (std::string line; std::getline(log, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.value("trace_id", "") == trace_id) stream_logged = e;
    }
    if (stream_logged.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(stream_logged.is_null()) << "no access-log line for the streamed request";
  EXPECT_EQ(stream_logged["routing"], routing);
  // No header, no trace (and KServe generate carries it the same way when asked).
  EXPECT_FALSE(post_ok("/v1/completions", body)["choices"][0].contains("routing"));
  auto k_gen = server_->client().Post("/v2/models/mixtral/generate", {{"x-mmserve-trace-routing", "true"}},
                                      json{{"text_input", "ab"}, {"max_tokens", 3}, {"ignore_eos", true}}.dump(),
                                      "application/json");
  ASSERT_TRUE(k_gen);
  ASSERT_EQ(k_gen->status, 200) << k_gen->body;
  EXPECT_EQ(json::parse(k_gen->body)["routing"]["experts"].size(), 3u);
  json k_logged;  // its span too
  for (int i = 0; i < 100 && k_logged.is_null(); ++i) {
    std::istringstream log(server_->access_log());
    for (std::string line; std::getline(log, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.value("path", "") == "/v2/models/mixtral/generate" && e.contains("routing")) {
        k_logged = e;
      }
    }
    if (k_logged.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(k_logged.is_null()) << "no access-log line with the generate route's routing trace";
  EXPECT_EQ(k_logged["routing"], json::parse(k_gen->body)["routing"]);
  // The expert-load metrics: every layer's routed tokens (k per token) and its busiest expert's share. Published
  // between steps and after each batch: poll until the last request's tokens are in.
  // Two completions of p + n - 1 fed tokens and one of 2 + 2, k decisions each (warm-up tokens too: at least).
  const double expected = static_cast<double>(k * (2 * fed + 4));
  auto routed_in = [](const std::string& text) {
    double routed = 0;
    for (int e = 0; e < 5; ++e) {
      const std::string name = "mmserve_moe_expert_tokens_total{model=\"mixtral\",layer=\"0\",expert=\"" +
                               std::to_string(e) + "\"} ";
      const size_t at = text.find(name);
      if (at != std::string::npos) routed += std::stod(text.substr(at + name.size()));
    }
    return routed;
  };
  std::string text;
  for (int i = 0; i < 250; ++i) {
    auto m = server_->client().Get("/metrics");
    ASSERT_TRUE(m);
    text = m->body;
    if (routed_in(text) >= expected) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(routed_in(text), expected) << text.substr(0, 2000);
  const std::string share = "mmserve_moe_top_expert_share{model=\"mixtral\",layer=\"0\"} ";
  const size_t at = text.find(share);
  ASSERT_NE(at, std::string::npos);
  const double s = std::stod(text.substr(at + share.size()));
  EXPECT_GE(s, 1.0 / 5);
  EXPECT_LE(s, 1.0);
}

TEST_F(Generate, MalformedBodiesGet400WithAJsonMessage) {
  const std::string gen = std::string("/v2/models/") + kLlm + "/generate";
  const std::string gen_stream = gen + "_stream";
  struct Case {
    std::string path, body, needle;
    int status = 400;
  };
  const std::vector<Case> cases = {
      {gen, "{", "malformed JSON"},
      {gen, "[1]", "JSON object"},
      {gen, R"({"parameters": {}})", "text_input"},
      {gen, R"({"text_input": "a", "parameters": {"beam_width": 4, "top_n": 1}})", "'beam_width', 'top_n'"},
      {gen, R"({"text_input": "a", "logprobs": 1})", "unknown field(s) 'logprobs'"},
      {gen, R"({"text_input": "a", "max_tokens": -1})", "max_tokens"},
      {gen, R"({"text_input": "a", "parameters": {"temperature": "hot"}})", "temperature"},
      {gen_stream, R"({"text_input": "a", "parameters": {"top_p": 7}})", "top_p"},
      {gen_stream, R"({"text_input": 3})", "text_input"},
      {gen, R"({"text_input": "a"})", "does not generate text", 400},  // the CLIP model, below
      {"/v2/models/nope/generate", R"({"text_input": "a"})", "unknown model", 404},
      {gen.substr(0, gen.size() - 9) + "/versions/3/generate", R"({"text_input": "a"})", "no version", 404},
      {"/v1/completions", R"({"model": "stories", "prompt": "a", "n": 17})", "'n' must be in [1, 16]"},
      {"/v1/completions", R"({"model": "stories", "prompt": "a", "n": 2, "best_of": 4})", "best_of"},
      {"/v1/completions", R"({"model": "stories", "prompt": "a", "logprobs": 21})", "logprobs"},
      {"/v1/completions", R"({"model": "stories", "prompt": "a", "logprobs": "5"})", "logprobs"},
      {"/v1/chat/completions", R"({"model": "stories", "messages": [{"role": "user", "content": "a"}],
          "top_logprobs": 2})", "needs 'logprobs'"},
      {"/v1/chat/completions", R"({"model": "stories", "messages": [{"role": "user", "content": "a"}],
          "logprobs": true, "top_logprobs": 99})", "top_logprobs"},
      {"/v1/completions", R"({"model": "stories", "prompt": "a", "n": 2, "stream": true, "max_tokens": 0})",
       "max_tokens"},
  };
  for (Case c : cases) {
    if (c.needle == "does not generate text") c.path = std::string("/v2/models/") + kClip + "/generate";
    auto r = server_->client().Post(c.path, c.body, "application/json");
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    // KServe's {"error": "..."}, OpenAI's {"error": {"message": ...}}.
    const std::string message = j["error"].is_string() ? j["error"].get<std::string>()
                                                       : j["error"].value("message", std::string());
    EXPECT_NE(message.find(c.needle), std::string::npos) << c.path << " " << c.body << ": " << r->body;
    EXPECT_EQ(c.path.rfind("/v2/", 0) == 0, j["error"].is_string()) << r->body;
  }
}

}  // namespace
}  // namespace mmserve
