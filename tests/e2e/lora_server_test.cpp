// LoRA adapters served (issue 16): the real `mmserve serve` with the tiny HF Llama (tests/fixtures/llama, with the
// 256-id tokenizer of llava_servable) and PEFT's adapters (tests/fixtures/lora, made by PEFT on the GPU host),
// driven over HTTP. `mmserve generate --adapter` gives PEFT's greedy ids for every adapter (its JSON has the ids),
// and a request naming an adapter as its model gets that run's text. Covers: --lora-modules at start, /v1/models
// listing adapters with their parent, POST /v1/load_lora_adapter and /v1/unload_lora_adapter while requests for the
// base model and other adapters are in flight (none lost, each its own answer: batches mix adapters), GET
// /v2/adapters, and the errors: 400 for a missing field or a broken adapter, 409 for a name in use, 404 for an
// unknown adapter, 403 on a server without --allow-runtime-lora-updating. CLIP's image adapters (merged copies):
// loaded onto the tiny CLIP over HTTP, PEFT's embeddings through KServe infer and /v1/embeddings beside the base.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../conformance/golden.h"
#include "server_process.h"
#include "test_paths.h"

namespace mmserve {
namespace {

using nlohmann::json;
using namespace e2e;

const fs::path kFixtures = MMSERVE_FIXTURES_DIR;
const char* kAdapters[] = {"llama-qv-r4", "llama-all-r8-rslora", "llama-patterns-regex"};

// `mmserve generate` greedy under an adapter (or none): its JSON (ids and text).
json cli_generate(const fs::path& model, const std::string& adapter, const std::vector<int32_t>& prompt) {
  std::string ids;
  for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  std::string cmd = mmserve_binary() + " generate --model " + model.string() + " --prompt-ids " + ids +
                    " --max-new-tokens 12 --temperature 0 --ignore-eos --output json";
  if (!adapter.empty()) cmd += " --adapter " + (kFixtures / "lora" / adapter).string();
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int rc = ::pclose(pipe);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return json::parse(out, nullptr, false);
}

class LoraServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("mmserve_e2e_lora_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_ / "llama");
    for (const char* f : {"config.json", "model.safetensors"}) {
      fs::copy_file(kFixtures / "llama/llama-gqa-f32" / f, *root_ / "llama" / f);
    }
    fs::copy_file(kFixtures / "llava_servable/tokenizer.json", *root_ / "llama/tokenizer.json");
    // The tiny CLIP, for its image adapters (copy_file follows the fixture's tokenizer.json link).
    fs::create_directories(*root_ / "clip");
    for (const char* f : {"config.json", "model.safetensors", "preprocessor_config.json", "tokenizer.json",
                          "tokenizer_config.json"}) {
      fs::copy_file(kFixtures / "clip-tiny-quickgelu-f32" / f, *root_ / "clip" / f);
    }
    // Two replicas, batches of one: an adapter must be on each (the runtime loads it per instance).
    std::ofstream(*root_ / "clip/mmserve.yaml") << "device: cpu\ninstances: 2\nmax_batch_size: 1\n";
    prompt_ = new std::vector<int32_t>(
        json::parse(std::ifstream(kFixtures / "lora/llama-qv-r4/golden.json"))["prompt_ids"].get<std::vector<int32_t>>());
    // What each adapter must answer: the CLI's run, itself checked against PEFT's greedy ids here.
    expected_ = new std::map<std::string, std::string>();
    (*expected_)[""] = cli_generate(*root_ / "llama", "", *prompt_)["text"];
    for (const char* a : kAdapters) {
      const json run = cli_generate(*root_ / "llama", a, *prompt_);
      const json golden = json::parse(std::ifstream(kFixtures / "lora" / a / "golden.json"));
      EXPECT_EQ(run["ids"], golden["greedy_ids"]) << a << ": mmserve generate --adapter is not PEFT's";
      (*expected_)[a] = run["text"];
    }
    // A second copy of the model whose mmserve.yaml loads PEFT's three adapters and the gate head over them
    // (tests/fixtures/lora_gate): requests with "adapter": "auto" are routed.
    fs::create_directories(*root_ / "gated");
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
      fs::copy_file(*root_ / "llama" / f, *root_ / "gated" / f);
    }
    std::ofstream yaml(*root_ / "gated/mmserve.yaml");
    yaml << "adapter_routing: gate\ngate: " << (kFixtures / "lora_gate/gate.safetensors").string()
         << "\nadapters:\n";  // the issue's keys
    for (const char* a : kAdapters) yaml << "  " << a << ": " << (kFixtures / "lora" / a).string() << "\n";
    yaml.close();
    server_ = new ServerProcess(*root_, {"--lora-modules", "qv=" + (kFixtures / "lora/llama-qv-r4").string() + "@llama",
                                         "--allow-runtime-lora-updating"});
    ASSERT_TRUE(server_->wait_ready()) << server_->stderr_text();
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove_all(*root_);
    delete root_;
    delete prompt_;
    delete expected_;
  }

  // The greedy text of `model` (a model or an adapter) for the fixtures' prompt; "" and the status on failure.
  static std::pair<int, std::string> complete(const std::string& model) {
    const json body = {{"model", model}, {"prompt", *prompt_}, {"max_tokens", 12}, {"temperature", 0},
                       {"ignore_eos", true}};
    auto r = server_->client().Post("/v1/completions", body.dump(), "application/json");
    if (!r) return {0, ""};
    if (r->status != 200) return {r->status, r->body};
    const json j = json::parse(r->body);
    EXPECT_EQ(j["model"], model);  // the answer names what the request named
    return {200, j["choices"][0]["text"].get<std::string>()};
  }
  static httplib::Result post(const std::string& path, const json& body) {
    return server_->client().Post(path, body.dump(), "application/json");
  }

  static fs::path* root_;
  static ServerProcess* server_;
  static std::vector<int32_t>* prompt_;
  static std::map<std::string, std::string>* expected_;  // adapter fixture ("" = none) -> greedy text
};
fs::path* LoraServer::root_ = nullptr;
ServerProcess* LoraServer::server_ = nullptr;
std::vector<int32_t>* LoraServer::prompt_ = nullptr;
std::map<std::string, std::string>* LoraServer::expected_ = nullptr;

TEST_F(LoraServer, AnAdapterFromTheCommandLineIsAModelWithItsParent) {
  auto models = server_->client().Get("/v1/models");
  ASSERT_TRUE(models);
  const json list = json::parse(models->body)["data"];
  json qv;
  for (const json& m : list) {
    if (m["id"] == "qv") qv = m;
  }
  ASSERT_FALSE(qv.is_null()) << models->body;
  EXPECT_EQ(qv["parent"], "llama");
  EXPECT_EQ(complete("qv"), std::make_pair(200, (*expected_)["llama-qv-r4"]));
  EXPECT_EQ(complete("llama"), std::make_pair(200, (*expected_)[""]));
  EXPECT_NE((*expected_)["llama-qv-r4"], (*expected_)[""]);  // else the comparison proves nothing
}

TEST_F(LoraServer, HotPlugWhileRequestsRunLosesNothingAndBatchesMixAdapters) {
  // Requests for the base model and the start-up adapter keep running while adapters come and go.
  std::atomic<bool> stop{false};
  std::atomic<int> done{0}, wrong{0};
  std::vector<std::thread> clients;
  for (const std::string model : {"llama", "qv", "llama", "qv"}) {
    clients.emplace_back([&, model] {
      const std::string want = (*expected_)[model == "qv" ? "llama-qv-r4" : ""];
      while (!stop) {
        const auto [status, text] = complete(model);
        if (status != 200 || text != want) {
          ++wrong;
          std::fprintf(stderr, "%s: %d %s\n", model.c_str(), status, text.c_str());
        }
        ++done;
      }
    });
  }
  struct Joiner {  // the clients stop and join however the test leaves (an ASSERT returns early)
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, clients};
  for (int round = 0; round < 3; ++round) {
    auto loaded = post("/v1/load_lora_adapter", {{"lora_name", "rs"},
                                                 {"lora_path", (kFixtures / "lora/llama-all-r8-rslora").string()},
                                                 {"base_model", "llama"}});
    ASSERT_TRUE(loaded);
    ASSERT_EQ(loaded->status, 200) << loaded->body;
    EXPECT_NE(loaded->body.find("added successfully"), std::string::npos);
    auto patterns = post("/v1/load_lora_adapter", {{"lora_name", "patterns"},
                                                   {"lora_path", (kFixtures / "lora/llama-patterns-regex").string()},
                                                   {"base_model", "llama"}});
    ASSERT_TRUE(patterns);
    ASSERT_EQ(patterns->status, 200) << patterns->body;
    // Both new adapters at once, beside the running ones: each its own answer.
    std::pair<int, std::string> rs, pt;
    std::thread a([&] { rs = complete("rs"); }), b([&] { pt = complete("patterns"); });
    a.join(), b.join();
    EXPECT_EQ(rs, std::make_pair(200, (*expected_)["llama-all-r8-rslora"]));
    EXPECT_EQ(pt, std::make_pair(200, (*expected_)["llama-patterns-regex"]));
    auto registry = server_->client().Get("/v2/adapters");
    ASSERT_TRUE(registry);
    const json listed = json::parse(registry->body);
    json adapters = json::array();  // the gated model's own three are listed too, under their parent
    for (const json& e : listed["adapters"]) {
      if (e["parent"] == "llama") adapters.push_back(e);
    }
    ASSERT_EQ(adapters.size(), 3u) << registry->body;
    for (const json& e : adapters) {
      EXPECT_EQ(e["loaded_on"], "cpu");
      if (e["id"] == "rs") {
        EXPECT_EQ(e["rank"], 8);
        EXPECT_EQ(e["target_modules"].size(), 7u);
      }
      if (e["id"] == "patterns") EXPECT_EQ(e["rank"], 6);  // rank_pattern's largest
      if (e["id"] == "rs" || e["id"] == "patterns") EXPECT_EQ(e["requests"], 1);  // the one request above
    }
    for (const char* name : {"rs", "patterns"}) {
      auto unloaded = post("/v1/unload_lora_adapter", {{"lora_name", name}});
      ASSERT_TRUE(unloaded);
      EXPECT_EQ(unloaded->status, 200) << unloaded->body;
    }
    EXPECT_EQ(complete("rs").first, 404);  // gone: the name is no model now
  }
  // Let the clients see some traffic after the last unload too.
  const int seen = done.load();
  while (done.load() < seen + 8) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(done.load(), 8);
}

// Gate routing over HTTP: "adapter": "auto" on the gated model gets torch's two adapters with torch's weights in
// the choice's `adapters` field and in the access-log line, and PEFT's text for the pair applied together (the
// CLI's run, itself checked against PEFT's ids); "auto" on a model without a gate is a 400.
TEST_F(LoraServer, AdapterAutoIsRoutedByTheGateHead) {
  const json meta = json::parse(std::ifstream(kFixtures / "lora_gate/golden.json"));
  const json& mix = meta["mix"];
  const std::vector<int32_t> prompt = meta["prompts"][mix["prompt"].get<size_t>()].get<std::vector<int32_t>>();
  const json body = {{"model", "gated"}, {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0},
                     {"ignore_eos", true}, {"adapter", "auto"}};
  auto r = post("/v1/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  ASSERT_EQ(choice["adapters"].size(), 2u) << r->body;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(choice["adapters"][i]["name"], mix["adapters"][i]);
    EXPECT_NEAR(choice["adapters"][i]["weight"].get<double>(), mix["weights"][i].get<double>(), 1e-5);
  }
  // The text of PEFT's greedy ids for the pair: decode them with the CLI's tokenizer path (--prompt-ids of the
  // greedy ids run for zero new tokens is not a thing), so compare with `mmserve generate --adapter auto`.
  std::string ids;
  for (int32_t id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  std::string cmd = mmserve_binary() + " generate --model " + (*root_ / "llama").string() + " --adapter auto --gate " +
                    (kFixtures / "lora_gate/gate.safetensors").string() + " --prompt-ids " + ids +
                    " --max-new-tokens 12 --temperature 0 --ignore-eos --output json";
  for (const char* a : kAdapters) cmd += " --adapters " + (kFixtures / "lora" / a).string();
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << out;
  const json cli = json::parse(out);
  EXPECT_EQ(cli["ids"], mix["greedy_ids"]);
  EXPECT_EQ(choice["text"], cli["text"]);
  json logged;
  for (int i = 0; i < 100 && logged.is_null(); ++i) {
    std::istringstream log(server_->access_log());
    for (std::string line; std::getline(log, line);) {
      const json e = json::parse(line, nullptr, false);
      if (!e.is_discarded() && e.contains("adapters")) logged = e;
    }
    if (logged.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(logged.is_null()) << "no access-log line with the gate's choice";
  EXPECT_EQ(logged["adapters"], choice["adapters"]);
  // adapter_routing: gate routes a request that names no adapter the same way.
  json unnamed = body;
  unnamed.erase("adapter");
  auto routed = post("/v1/completions", unnamed);
  ASSERT_TRUE(routed);
  ASSERT_EQ(routed->status, 200) << routed->body;
  EXPECT_EQ(json::parse(routed->body)["choices"][0]["adapters"], choice["adapters"]);
  json plain = body;
  plain["model"] = "llama";
  auto refused = post("/v1/completions", plain);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("gate"), std::string::npos) << refused->body;
}

TEST_F(LoraServer, BadAdapterRequestsGetAClearError) {
  struct Case {
    const char* path;
    json body;
    int status;
    const char* needle;
  };
  const std::string good = (kFixtures / "lora/llama-qv-r4").string();
  const Case cases[] = {
      {"/v1/load_lora_adapter", {{"lora_path", good}}, 400, "lora_name"},
      {"/v1/load_lora_adapter", {{"lora_name", "x"}}, 400, "lora_path"},
      {"/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "/nonexistent/adapter"}, {"base_model", "llama"}},
       400, "adapter_config"},
      {"/v1/load_lora_adapter",
       {{"lora_name", "x"}, {"lora_path", (kFixtures / "llama/llama-gqa-f32").string()}, {"base_model", "llama"}}, 400,
       "adapter_config"},
      {"/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", good}}, 400, "several loaded models"},
      {"/v1/load_lora_adapter", {{"lora_name", "qv"}, {"lora_path", good}, {"base_model", "llama"}}, 409,
       "already loaded"},
      {"/v1/load_lora_adapter", {{"lora_name", "llama-qv-r4"}, {"lora_path", good}, {"base_model", "llama"}}, 409,
       "already loaded"},
      {"/v1/load_lora_adapter", {{"lora_name", "llama"}, {"lora_path", good}}, 409, "names a model"},
      {"/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", good}, {"base_model", "nope"}}, 404, "nope"},
      {"/v1/unload_lora_adapter", {{"lora_name", "never-loaded"}}, 404, "never-loaded"},
      {"/v1/unload_lora_adapter", json::array({1}), 400, "object"},
  };
  for (const Case& c : cases) {
    auto r = post(c.path, c.body);
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body.dump() << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.needle), std::string::npos) << r->body;
  }
  auto broken = server_->client().Post("/v1/load_lora_adapter", "{\"lora_name\": ", "application/json");
  ASSERT_TRUE(broken);
  EXPECT_EQ(broken->status, 400);
  // A broken adapter directory: a config PEFT would not load, named in the answer.
  const fs::path dora = *root_ / "dora";
  fs::create_directories(dora);
  std::ofstream(dora / "adapter_config.json") << R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"],
      "use_dora": true})";
  auto r = post("/v1/load_lora_adapter", {{"lora_name", "dora"}, {"lora_path", dora.string()}, {"base_model", "llama"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 501) << r->body;
  EXPECT_NE(r->body.find("use_dora"), std::string::npos) << r->body;
  // The server still serves.
  EXPECT_EQ(complete("qv").first, 200);
}

TEST_F(LoraServer, RuntimeUpdatingIsOffUnlessAllowed) {
  const fs::path repo = *root_ / "plain";
  fs::create_directories(repo / "llama");
  for (const auto& e : fs::directory_iterator(*root_ / "llama")) fs::copy_file(e.path(), repo / "llama" / e.path().filename());
  ServerProcess plain(repo);
  ASSERT_TRUE(plain.wait_ready()) << plain.stderr_text();
  auto r = plain.client().Post("/v1/load_lora_adapter",
                               json{{"lora_name", "qv"}, {"lora_path", (kFixtures / "lora/llama-qv-r4").string()}}.dump(),
                               "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_NE(r->body.find("--allow-runtime-lora-updating"), std::string::npos);
  // A malformed --lora-modules is a usage error: the server does not start and says the form.
  const fs::path other = *root_ / "plain2";  // its own repository: its own stderr file
  fs::create_directories(other);
  ServerProcess malformed(other, {"--lora-modules", "no-equals-sign"});
  EXPECT_FALSE(malformed.wait_ready(std::chrono::seconds(20)));
  EXPECT_NE(malformed.stderr_text().find("NAME=DIR"), std::string::npos) << malformed.stderr_text();
  // A broken --lora-modules: the server says why and never reports ready (as a model that fails to load).
  ServerProcess bad(repo, {"--lora-modules", "x=" + (repo / "missing").string()});
  for (int i = 0; i < 400 && bad.stderr_text().find("mmserve: error:") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(bad.stderr_text().find("adapter_config.json"), std::string::npos) << bad.stderr_text();
  auto ready = bad.client().Get("/v2/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
}

// Online distillation of the gate (issue 16 item 5) on a server of its own: a copy of the gated model with
// options.gate_distill; requests naming two of its adapters (their prototypes) and "auto" ones. /metrics counts the
// named adapters' requests and tokens, and the distiller's samples and rounds; its state directory holds the head.
TEST_F(LoraServer, GateDistillationCountsAdaptersAndRounds) {
  const fs::path repo = *root_ / "distill";
  const fs::path model = repo / "distilled";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(*root_ / "llama" / f, model / f);
  {
    std::ofstream yaml(model / "mmserve.yaml");
    yaml << "gate: " << (kFixtures / "lora_gate/gate.safetensors").string() << "\nadapters:\n";
    for (const char* a : kAdapters) yaml << "  " << a << ": " << (kFixtures / "lora" / a).string() << "\n";
    yaml << "options:\n  gate_distill: true\n  gate_distill_dir: state\n  gate_distill_lr: 0.01\n"
            "  gate_distill_interval_ms: 50\n  gate_distill_min_samples: 5\n";
  }
  ServerProcess server(repo);
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  EXPECT_TRUE(fs::exists(model / "state/gate.safetensors"));  // written at load: the directory is writable
  auto send = [&](const json& extra) {
    json body = {{"prompt", *prompt_}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
    body.update(extra);
    auto r = server.client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  };
  // Two adapters named (two prototypes: targets exist), then "auto" requests; >= 5 samples so one is held apart.
  for (int i = 0; i < 4; ++i) send({{"model", kAdapters[0]}});
  for (int i = 0; i < 3; ++i) send({{"model", kAdapters[1]}});
  auto metric = [&](const std::string& series) -> double {  // -1 when absent
    auto r = server.client().Get("/metrics");
    if (!r || r->status != 200) return -1;
    const size_t at = r->body.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + series.size() + 2));
  };
  // Rounds run on the distiller's thread; the metrics follow at the next batch's end: poll with "auto" requests.
  double rounds = 0;
  for (int i = 0; i < 100 && rounds < 1; ++i) {
    send({{"model", "distilled"}, {"adapter", "auto"}});
    rounds = metric("mmserve_gate_distill_updates_total{model=\"distilled\"}") +
             metric("mmserve_gate_distill_rollbacks_total{model=\"distilled\"}");
  }
  EXPECT_GE(rounds, 1) << "no distillation round reached /metrics";
  EXPECT_GE(metric("mmserve_gate_distill_samples_total{model=\"distilled\"}"), 8);
  EXPECT_GE(metric("mmserve_gate_distill_heldout_loss{model=\"distilled\"}"), 0);
  for (int a = 0; a < 2; ++a) {  // at least the named ones (the gate may route "auto" requests to them too)
    const std::string labels = std::string("{model=\"distilled\",adapter=\"") + kAdapters[a] + "\"}";
    const double requests = metric("mmserve_adapter_requests_total" + labels);
    EXPECT_GE(requests, a == 0 ? 4 : 3) << labels;
    EXPECT_EQ(metric("mmserve_adapter_generation_tokens_total" + labels), 4 * requests) << labels;  // 4 tokens each
  }
  EXPECT_TRUE(fs::exists(model / "state/prototypes.safetensors"));
}

// Unloading an adapter in use (issue 16 item 2), on a server of its own: a copy of the model whose config allows 8192
// positions, so a request's kLong tokens are still being generated when the unload comes. With "fail_running": true
// a streamed request and a whole one under the adapter (running, or queued behind it) end with the 404 that names the
// unload (an error event and [DONE] in the stream, well before kLong tokens), and the server keeps serving. By default
// the unload returns while the stream still runs, new requests naming the adapter get 404, and the stream ends as it
// would have (all kLong tokens, finish_reason "length").
TEST_F(LoraServer, UnloadingAnAdapterInUseFailsItsRequestsOnlyWhenAsked) {
  const fs::path repo = *root_ / "long";
  fs::create_directories(repo / "llama");
  for (const auto& e : fs::directory_iterator(*root_ / "llama")) {
    fs::copy_file(e.path(), repo / "llama" / e.path().filename());
  }
  json config = json::parse(std::ifstream(repo / "llama/config.json"));
  config["max_position_embeddings"] = 8192;
  std::ofstream(repo / "llama/config.json") << config.dump(2);
  const std::string qv = (kFixtures / "lora/llama-qv-r4").string();
  ServerProcess server(repo, {"--lora-modules", "qv=" + qv, "--allow-runtime-lora-updating"});
  ASSERT_TRUE(server.wait_ready()) << server.stderr_text();
  constexpr int64_t kLong = 3000;  // a second or more of generation: the unload always comes while it runs
  const json whole = {
      {"model", "qv"}, {"prompt", *prompt_}, {"max_tokens", kLong}, {"temperature", 0}, {"ignore_eos", true}};
  // One streamed request on its own thread: the event stream as it arrives, `started` once its first event came
  // (its sequence is running), `ended` once the response is complete.
  struct Stream {
    std::mutex mutex;
    std::string text;
    std::atomic<bool> started{false}, ended{false};
    int status = 0;
    std::thread thread;
    ~Stream() {
      if (thread.joinable()) thread.join();
    }
    std::vector<json> events() {  // the data payloads, [DONE] as a string
      std::lock_guard<std::mutex> lock(mutex);
      std::vector<json> out;
      for (size_t at = text.find("data: "); at != std::string::npos; at = text.find("data: ", at + 1)) {
        const size_t end = text.find("\n\n", at);
        const std::string data = text.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
        out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data, nullptr, false));
      }
      return out;
    }
  };
  auto start_stream = [&](Stream& s) {
    s.thread = std::thread([&] {
      json body = whole;
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      httplib::Request request;
      request.method = "POST";
      request.path = "/v1/completions";
      request.body = body.dump();
      request.set_header("Content-Type", "application/json");
      request.content_receiver = [&s](const char* data, size_t n, uint64_t, uint64_t) {
        std::lock_guard<std::mutex> lock(s.mutex);
        s.text.append(data, n);
        if (s.text.find("data: ") != std::string::npos) s.started = true;
        return true;
      };
      auto r = server.client().send(request);
      s.status = r ? r->status : 0;
      s.ended = true;
      s.started = true;  // whatever happened, nobody waits for it any longer
    });
    for (int i = 0; i < 3000 && !s.started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  auto requests_for = [&](const std::string& name) {  // the registry's count: requests resolved to the adapter
    auto r = server.client().Get("/v2/adapters");
    const json listed = r ? json::parse(r->body, nullptr, false) : json();
    if (listed.is_object() && listed.contains("adapters")) {
      for (const json& e : listed["adapters"]) {
        if (e["id"] == name) return e["requests"].get<int64_t>();
      }
    }
    return int64_t{-1};
  };
  auto unload = [&](const json& body) {
    auto r = server.client().Post("/v1/unload_lora_adapter", body.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  };
  EXPECT_EQ(unload({{"lora_name", "qv"}, {"fail_running", "yes"}}).first, 400);  // a flag, or nothing

  // fail_running: a whole request and a stream under the adapter, both prepared (counted) before the unload.
  std::pair<int, std::string> whole_answer;
  struct Joined {  // joins however the test leaves (an ASSERT returns early)
    std::thread thread;
    ~Joined() {
      if (thread.joinable()) thread.join();
    }
  } whole_request{std::thread([&] {
    auto r = server.client().Post("/v1/completions", whole.dump(), "application/json");
    whole_answer = r ? std::make_pair(r->status, r->body) : std::make_pair(0, std::string());
  })};
  for (int i = 0; i < 3000 && requests_for("qv") < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Stream failed;
  start_stream(failed);
  for (int i = 0; i < 3000 && requests_for("qv") < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(requests_for("qv"), 2);
  ASSERT_FALSE(failed.ended) << "the stream ended before the unload: make kLong larger";
  EXPECT_EQ(unload({{"lora_name", "qv"}, {"fail_running", true}}).first, 200);
  whole_request.thread.join();
  failed.thread.join();
  EXPECT_EQ(whole_answer.first, 404) << whole_answer.second;
  EXPECT_NE(whole_answer.second.find("adapter 'qv' was unloaded while this request ran"), std::string::npos)
      << whole_answer.second;
  EXPECT_EQ(failed.status, 200);  // the stream had begun: its error comes as an event
  const std::vector<json> events = failed.events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json& error = events[events.size() - 2];
  ASSERT_TRUE(error.contains("error")) << error.dump();
  EXPECT_NE(error["error"]["message"].get<std::string>().find("adapter 'qv' was unloaded"), std::string::npos);
  EXPECT_LT(static_cast<int64_t>(events.size()), kLong);  // it stopped, not ran to its end
  // Their KV blocks went back: the pool's usage (published when the engine loop ends) returns to 0.
  double kv_usage = -1;
  for (int i = 0; i < 250 && kv_usage != 0; ++i) {
    auto metrics = server.client().Get("/metrics");
    const std::string gauge = "mmserve_kv_cache_usage_ratio{model=\"llama\"} ";
    const size_t at = metrics ? metrics->body.find(gauge) : std::string::npos;
    if (at != std::string::npos) kv_usage = std::stod(metrics->body.substr(at + gauge.size()));
    if (kv_usage != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(kv_usage, 0.0);
  // The server keeps serving: the base model answers, the name is gone, and it can be loaded again.
  const json base = {{"model", "llama"}, {"prompt", *prompt_}, {"max_tokens", 4}, {"ignore_eos", true}};
  auto served = server.client().Post("/v1/completions", base.dump(), "application/json");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200) << served->body;
  json gone = whole;
  gone["max_tokens"] = 4;
  auto missing = server.client().Post("/v1/completions", gone.dump(), "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << missing->body;
  auto reloaded = server.client().Post("/v1/load_lora_adapter", json{{"lora_name", "qv"}, {"lora_path", qv}}.dump(),
                                       "application/json");
  ASSERT_TRUE(reloaded);
  ASSERT_EQ(reloaded->status, 200) << reloaded->body;

  // The default: the unload returns while the stream runs; the stream finishes under the adapter it holds.
  Stream kept;
  start_stream(kept);
  ASSERT_FALSE(kept.ended) << "the stream ended before the unload: make kLong larger";
  EXPECT_EQ(unload({{"lora_name", "qv"}}).first, 200);
  EXPECT_FALSE(kept.ended) << "the unload waited for the running stream";
  missing = server.client().Post("/v1/completions", gone.dump(), "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << missing->body;
  kept.thread.join();
  EXPECT_EQ(kept.status, 200);
  const std::vector<json> finished = kept.events();
  ASSERT_GE(finished.size(), 3u);
  EXPECT_EQ(finished.back(), "[DONE]");
  const json& usage = finished[finished.size() - 2];
  ASSERT_TRUE(usage.contains("usage")) << usage.dump();
  EXPECT_EQ(usage["usage"]["completion_tokens"], kLong);
  bool length = false;
  for (const json& e : finished) {
    EXPECT_FALSE(e.is_object() && e.contains("error")) << e.dump();
    if (e.is_object() && e.contains("choices") && !e["choices"].empty() &&
        e["choices"][0].value("finish_reason", json()) == "length") {
      length = true;
    }
  }
  EXPECT_TRUE(length);
}

}  // namespace
}  // namespace mmserve

namespace mmserve {
namespace {

// CLIP's adapters (issue 16 item 1): PEFT's image adapter and an adapter on both towers, loaded onto the tiny CLIP
// while it serves; a KServe infer naming the image adapter gets PEFT's image embeddings of the fixture's 8 images, an
// OpenAI embeddings request naming the other PEFT's text embeddings, the base model its own; the registry says
// modality and hot_swappable; a decoder's adapter is refused on CLIP naming what CLIP adapts; after the unload the
// name is 404 and the base serves on.
TEST_F(LoraServer, ClipsImageAdaptersServePeftsEmbeddingsBesideTheBase) {
  for (const auto& [name, dir] : {std::pair<const char*, const char*>{"lora-vision-cats", "lora/clip-vision-r4"},
                                  std::pair<const char*, const char*>{"clip-both", "lora/clip-both-r8-rslora"}}) {
    auto r = post("/v1/load_lora_adapter",
                  {{"lora_name", name}, {"lora_path", (kFixtures / dir).string()}, {"base_model", "clip"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  // Without base_model it goes to the one loaded model whose modules it adapts (the decoders refuse CLIP's modules).
  auto unnamed = post("/v1/load_lora_adapter",
                      {{"lora_name", "vision-unnamed"}, {"lora_path", (kFixtures / "lora/clip-vision-r4").string()}});
  ASSERT_TRUE(unnamed);
  ASSERT_EQ(unnamed->status, 200) << unnamed->body;
  {
    auto listed = server_->client().Get("/v2/adapters");
    ASSERT_TRUE(listed);
    const json all = json::parse(listed->body);
    bool found = false;
    for (const json& e : all["adapters"]) {
      if (e["id"] == "vision-unnamed") found = e["parent"] == "clip";
    }
    EXPECT_TRUE(found) << listed->body;
    auto gone = post("/v1/unload_lora_adapter", {{"lora_name", "vision-unnamed"}});
    ASSERT_TRUE(gone);
    EXPECT_EQ(gone->status, 200) << gone->body;
  }
  auto wrong = post("/v1/load_lora_adapter", {{"lora_name", "qv-on-clip"},
                                              {"lora_path", (kFixtures / "lora/llama-qv-r4").string()},
                                              {"base_model", "clip"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 501) << wrong->body;
  EXPECT_NE(wrong->body.find("visual_projection"), std::string::npos) << wrong->body;

  testing::Golden vision((kFixtures / "lora/clip-vision-r4/golden.safetensors").string());
  testing::Golden both((kFixtures / "lora/clip-both-r8-rslora/golden.safetensors").string());
  testing::Golden base((kFixtures / "clip-tiny-quickgelu-f32/golden.safetensors").string());
  const std::vector<float> pixels = vision.f32("pixel_values");  // [8, 3, 32, 32], the base fixture's
  constexpr int64_t kDim = 10;
  auto infer_images = [&](const std::string& model) {
    const json body = {{"inputs", {{{"name", "pixel_values"}, {"datatype", "FP32"}, {"shape", {8, 3, 32, 32}},
                                    {"data", pixels}}}}};
    auto r = server_->client().Post("/v2/models/" + model + "/infer", body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r || r->status != 200) return std::make_pair(r ? r->status : 0, std::vector<float>());
    const json out = json::parse(r->body);
    EXPECT_EQ(out["model_name"], model);
    return std::make_pair(200, out["outputs"][0]["data"].get<std::vector<float>>());
  };
  auto embed_texts = [&](const std::string& model, const std::vector<std::string>& texts) {
    auto r = post("/v1/embeddings", {{"model", model}, {"input", texts}});
    EXPECT_TRUE(r);
    std::vector<float> rows;
    if (!r || r->status != 200) return std::make_pair(r ? r->status : 0, rows);
    const json answer = json::parse(r->body);
    for (const json& d : answer["data"]) {
      const std::vector<float> e = d["embedding"].get<std::vector<float>>();
      rows.insert(rows.end(), e.begin(), e.end());
    }
    return std::make_pair(200, rows);
  };
  auto expect_rows = [&](const std::vector<float>& got, const std::vector<float>& want, int64_t rows, size_t first,
                         const char* what) {
    ASSERT_EQ(got.size(), static_cast<size_t>(rows * kDim)) << what;
    for (int64_t i = 0; i < rows; ++i) {
      const size_t w = first + static_cast<size_t>(i);
      EXPECT_LE(testing::relative_error(got.data() + i * kDim, want.data() + w * kDim, kDim), 1e-5) << what << " " << i;
    }
  };
  // Requests for the base and both adapters at once (one engine batch may hold all three).
  std::pair<int, std::vector<float>> adapted_images, base_images, adapted_texts;
  std::thread a([&] { adapted_images = infer_images("lora-vision-cats"); });
  std::thread b([&] { base_images = infer_images("clip"); });
  std::thread c([&] { adapted_texts = embed_texts("clip-both", {"a photo of a cat", "A DIAGRAM, of 2 dogs!!"}); });
  a.join(), b.join(), c.join();
  ASSERT_EQ(adapted_images.first, 200);
  ASSERT_EQ(base_images.first, 200);
  ASSERT_EQ(adapted_texts.first, 200);
  expect_rows(adapted_images.second, vision.f32("image_embeds"), 8, 0, "PEFT's image adapter");
  expect_rows(base_images.second, base.f32("image_embeds"), 8, 0, "the base model");
  const std::vector<float> text_ref = both.f32("text_embeds");  // golden texts 0 and 2
  ASSERT_EQ(adapted_texts.second.size(), static_cast<size_t>(2 * kDim));
  expect_rows(std::vector<float>(adapted_texts.second.begin(), adapted_texts.second.begin() + kDim), text_ref, 1, 0,
              "text 0 under clip-both");
  expect_rows(std::vector<float>(adapted_texts.second.begin() + kDim, adapted_texts.second.end()), text_ref, 1, 2,
              "text 2 under clip-both");

  // KServe clients ask for metadata and readiness on the name they infer on: the base's, under the adapter's name.
  auto metadata = server_->client().Get("/v2/models/lora-vision-cats");
  ASSERT_TRUE(metadata);
  ASSERT_EQ(metadata->status, 200) << metadata->body;
  const json meta = json::parse(metadata->body);
  EXPECT_EQ(meta["name"], "lora-vision-cats");
  EXPECT_EQ(meta["platform"], "mmserve_clip");
  auto ready = server_->client().Get("/v2/models/lora-vision-cats/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;

  auto registry = server_->client().Get("/v2/adapters");
  ASSERT_TRUE(registry);
  json entry;
  const json adapters = json::parse(registry->body);
  for (const json& e : adapters["adapters"]) {
    if (e["id"] == "lora-vision-cats") entry = e;
  }
  ASSERT_FALSE(entry.is_null()) << registry->body;
  EXPECT_EQ(entry["parent"], "clip");
  EXPECT_EQ(entry["modality"], "image");
  EXPECT_EQ(entry["hot_swappable"], false);
  EXPECT_EQ(entry["rank"], 4);
  EXPECT_GE(entry["requests"].get<int64_t>(), 1);

  // Both replicas serve the adapter: rounds of concurrent requests (batches of one) until each replica has run some,
  // every answer PEFT's.
  auto replica_batches = [&](const std::string& replica) {
    auto m = server_->client().Get("/metrics");
    if (!m) return int64_t{-1};
    std::istringstream lines(m->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("mmserve_replica_batches_total{", 0) == 0 && line.find("model=\"clip\"") != std::string::npos &&
          line.find("replica=\"" + replica + "\"") != std::string::npos) {
        return static_cast<int64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
      }
    }
    return int64_t{0};
  };
  const int64_t before0 = replica_batches("0"), before1 = replica_batches("1");
  for (int round = 0; round < 20 && (replica_batches("0") == before0 || replica_batches("1") == before1); ++round) {
    std::vector<std::pair<int, std::vector<float>>> answers(4);
    std::vector<std::thread> clients;
    for (auto& answer : answers) clients.emplace_back([&] { answer = infer_images("lora-vision-cats"); });
    for (std::thread& t : clients) t.join();
    for (const auto& answer : answers) {
      ASSERT_EQ(answer.first, 200);
      expect_rows(answer.second, vision.f32("image_embeds"), 8, 0, "PEFT's image adapter, either replica");
    }
  }
  EXPECT_GT(replica_batches("0"), before0) << "replica 0 ran none of the adapter's requests";
  EXPECT_GT(replica_batches("1"), before1) << "replica 1 ran none of the adapter's requests";

  for (const char* name : {"lora-vision-cats", "clip-both"}) {
    auto r = post("/v1/unload_lora_adapter", {{"lora_name", name}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(infer_images("lora-vision-cats").first, 404);
  auto gone = server_->client().Get("/v2/models/lora-vision-cats/ready");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  EXPECT_EQ(infer_images("clip").first, 200);
}

}  // namespace
}  // namespace mmserve
