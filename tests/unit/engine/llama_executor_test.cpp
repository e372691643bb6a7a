// LlamaExecutor and LlamaInputs on the real stories260K (converted by convert_llama2c): a batch of requests in
// three prompt forms finishes each with what it would get alone (greedy from BOS = llama2.c run.c's story; a
// text prompt = LlamaModel::greedy of HF's tokenisation; a stop string cuts the text before it), the streamed
// pieces add up to the final text, a cancelled request ends as kCancelled, and bad requests are refused by the
// preparer with a message.
#include "engine/llama_executor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../../conformance/golden.h"
#include "engine/families.h"
#include "models/llama/llama.h"
#include "models/llama/llama2c.h"

namespace mmserve::engine {
namespace {

namespace fs = std::filesystem;

class LlamaExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("mmserve_llama_exec_" + std::to_string(::getpid()))).string();
    ASSERT_TRUE(models::convert_llama2c(testing::fixture("../../assets/llama2c/stories260K.bin"),
                                        testing::fixture("../../assets/llama2c/tok512.bin"), dir_)
                    .ok());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override { make(nlohmann::json::object()); }
  // An executor with these mmserve.yaml options.
  void make(const nlohmann::json& family_options) {
    auto executor = LlamaExecutor::create_for_server(dir_, {}, family_options);
    ASSERT_TRUE(executor.ok()) << executor.status().to_string();
    executor_ = std::move(*executor);
    ASSERT_TRUE(executor_->warm().ok());
    PreparerOptions options;
    options.model = "stories";
    auto inputs = LlamaInputs::create_for_server(dir_, *executor_, options);
    ASSERT_TRUE(inputs.ok()) << inputs.status().to_string();
    inputs_ = std::move(*inputs);
  }
  StatusOr<Prepared> prepare(const LlamaParams& params, const std::string& text = "") {
    std::vector<InputItem> items;
    if (!text.empty()) {
      items.emplace_back();
      items.back().text = text;
    }
    return inputs_->prepare(items, &params);
  }
  static std::string dir_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<InputPreparer> inputs_;
};
std::string LlamaExecutorTest::dir_;

std::string trim(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

TEST_F(LlamaExecutorTest, ABatchGivesEachRequestWhatItGetsAlone) {
  LlamaParams story;
  story.sampling.temperature = 0;
  story.prompt_ids = std::vector<int32_t>{1};
  story.max_tokens = 256;
  story.ignore_eos = true;
  std::string streamed;
  story.on_delta = [&](const TextDelta& delta) {
    streamed += delta.text;
    return true;
  };
  LlamaParams text_prompt;
  text_prompt.sampling.temperature = 0;
  text_prompt.max_tokens = 20;
  LlamaParams stopping = text_prompt;
  stopping.max_tokens = 60;
  stopping.stop = {"Lily"};
  std::vector<Prepared> prepared;
  for (auto [params, text] : {std::pair{&story, ""}, {&text_prompt, "Once upon a time"}, {&stopping, "Once upon a time"}}) {
    auto p = prepare(*params, text);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    prepared.push_back(std::move(*p));
  }
  std::vector<BatchItem> batch(prepared.size());
  for (size_t i = 0; i < prepared.size(); ++i) batch[i].input = prepared[i].input.get();
  std::vector<std::shared_ptr<const ModelOutput>> outputs(batch.size());
  int finished = 0;
  BatchHooks hooks;
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out, double) {
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    outputs[i] = *out;
    ++finished;
  };
  executor_->run(batch, hooks);
  ASSERT_EQ(finished, 3);
  const auto* a = output_as<LlamaOutput>(outputs[0]);
  const auto* b = output_as<LlamaOutput>(outputs[1]);
  const auto* c = output_as<LlamaOutput>(outputs[2]);
  ASSERT_TRUE(a && b && c);
  std::ifstream golden(testing::fixture("llama2c/stories260K_golden_t0.txt"));
  EXPECT_EQ(trim(a->text), trim(std::string(std::istreambuf_iterator<char>(golden), {})));
  EXPECT_EQ(a->ids.size(), 256u);
  EXPECT_EQ(a->finish_reason, "length");
  EXPECT_EQ(streamed, a->text);
  // The text prompt alone, through the model directly.
  const auto& exec = dynamic_cast<const LlamaExecutor&>(*executor_);
  auto ids = exec.tokenizer().encode("Once upon a time");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(b->prompt_ids, *ids);
  auto model = models::LlamaModel::load(dir_);
  ASSERT_TRUE(model.ok());
  auto alone = (*model)->greedy(*ids, 20, /*ignore_eos=*/true);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(b->ids, *alone);
  EXPECT_EQ(b->finish_reason, "length");
  EXPECT_EQ(c->finish_reason, "stop");
  EXPECT_EQ(c->text.find("Lily"), std::string::npos) << c->text;
  EXPECT_EQ(b->text.rfind(c->text, 0), 0u) << "the stopped text is a prefix of the longer run";
}

// min_tokens: a stop string found before min_tokens does not stop (and EOS is never sampled before it).
TEST_F(LlamaExecutorTest, MinTokensHoldsStopsBack) {
  auto run_one = [&](int64_t min_tokens) {
    LlamaParams p;
    p.sampling.temperature = 0;
    p.max_tokens = 40;
    p.min_tokens = min_tokens;
    p.stop = {"there"};  // ", there was ..." : found at the second token
    auto prepared = prepare(p, "Once upon a time");
    EXPECT_TRUE(prepared.ok());
    std::vector<BatchItem> batch(1);
    batch[0].input = prepared->input.get();
    std::shared_ptr<const ModelOutput> out;
    BatchHooks hooks;
    hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const ModelOutput>> o, double) { out = *o; };
    executor_->run(batch, hooks);
    return *output_as<LlamaOutput>(out);
  };
  const LlamaOutput early = run_one(0), held = run_one(10);
  EXPECT_EQ(early.finish_reason, "stop");
  EXPECT_LT(early.ids.size(), 5u);
  EXPECT_GE(held.ids.size(), 10u);  // the stop string came before token 10: it did not stop there
  EXPECT_NE(held.text.find("there"), std::string::npos) << held.text;
}

TEST_F(LlamaExecutorTest, ACancelledRequestEndsCancelled) {
  LlamaParams params;
  params.prompt_ids = std::vector<int32_t>{1};
  params.max_tokens = 100;
  auto p = prepare(params);
  ASSERT_TRUE(p.ok());
  std::vector<BatchItem> batch(1);
  batch[0].input = p->input.get();
  int polls = 0;
  batch[0].cancelled = [&] { return ++polls > 3; };
  std::optional<StatusCode> code;
  BatchHooks hooks;
  hooks.finish = [&](size_t, StatusOr<std::shared_ptr<const ModelOutput>> out, double) { code = out.status().code(); };
  executor_->run(batch, hooks);
  EXPECT_EQ(code, StatusCode::kCancelled);
}

// Runs `params` (with their text prompts) as one batch; outputs in order.
std::vector<LlamaOutput> run_batch(LlamaExecutorTest& t, Executor& executor, std::vector<Prepared>& prepared) {
  std::vector<BatchItem> batch(prepared.size());
  for (size_t i = 0; i < prepared.size(); ++i) batch[i].input = prepared[i].input.get();
  std::vector<LlamaOutput> outputs(batch.size());
  BatchHooks hooks;
  hooks.finish = [&](size_t i, StatusOr<std::shared_ptr<const ModelOutput>> out, double) {
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    outputs[i] = *output_as<LlamaOutput>(*out);
  };
  executor.run(batch, hooks);
  return outputs;
}

// The engine's settings change how a batch is scheduled, never what each request gets: a pool so small that
// sequences are preempted and recomputed, a 5-token step budget (chunked prefill), and prefix caching of a
// shared prompt all give each request its greedy run alone.
TEST_F(LlamaExecutorTest, PreemptionChunkingAndPrefixCachingChangeNothing) {
  auto model = models::LlamaModel::load(dir_);
  ASSERT_TRUE(model.ok());
  const auto& exec = dynamic_cast<const LlamaExecutor&>(*executor_);
  const std::string lily = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
  const std::vector<std::string> prompts = {lily + " She", lily + " One day",
                                            "The dog", lily + " She"};
  std::vector<std::vector<int32_t>> alone;
  for (const std::string& text : prompts) {
    auto ids = exec.tokenizer().encode(text);
    ASSERT_TRUE(ids.ok());
    auto out = (*model)->greedy(*ids, 40, /*ignore_eos=*/true);
    ASSERT_TRUE(out.ok());
    alone.push_back(*out);
  }
  const int64_t per_token = (*model)->kv_bytes_per_token();
  for (const nlohmann::json& options :
       {nlohmann::json{{"kv_cache_bytes", per_token * 16 * 40}, {"block_size", 16}},  // 40 blocks: 640 slots
        nlohmann::json{{"max_num_batched_tokens", 5}}, nlohmann::json{{"block_size", 4}},
        nlohmann::json{{"enable_prefix_caching", false}, {"enable_chunked_prefill", false}},
        nlohmann::json{{"embeddings_on_host", true}}}) {  // CUDA's table placement: the CPU's is already the host
    SCOPED_TRACE(options.dump());
    make(options);
    std::vector<Prepared> prepared;
    for (const std::string& text : prompts) {
      LlamaParams p;
      p.sampling.temperature = 0;
      p.max_tokens = 40;
      p.ignore_eos = true;
      auto one = prepare(p, text);
      ASSERT_TRUE(one.ok());
      prepared.push_back(std::move(*one));
    }
    std::vector<LlamaOutput> outputs = run_batch(*this, *executor_, prepared);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outputs[i].ids, alone[i]) << prompts[i];
    // The same requests again: their prompts' full blocks are cached now.
    prepared.clear();
    for (const std::string& text : prompts) {
      LlamaParams p;
      p.sampling.temperature = 0;
      p.max_tokens = 40;
      p.ignore_eos = true;
      auto one = prepare(p, text);
      ASSERT_TRUE(one.ok());
      prepared.push_back(std::move(*one));
    }
    outputs = run_batch(*this, *executor_, prepared);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outputs[i].ids, alone[i]) << "again: " << prompts[i];
    const CacheStats prefix = executor_->caches()[0];
    if (options.contains("enable_prefix_caching")) {
      EXPECT_EQ(prefix.hits, 0);
    } else {
      EXPECT_GT(prefix.hits, 0) << "the repeated prompts share blocks";
    }
  }
}

// A pool that holds two sequences at a time for four requests: the scheduler preempts, and counts it.
TEST_F(LlamaExecutorTest, ASmallPoolPreemptsAndRecomputes) {
  auto model = models::LlamaModel::load(dir_);
  ASSERT_TRUE(model.ok());
  make({{"kv_cache_bytes", (*model)->kv_bytes_per_token() * 16 * 34}, {"enable_prefix_caching", false}});
  std::vector<Prepared> prepared;
  for (int i = 0; i < 4; ++i) {
    LlamaParams p;
    p.sampling.temperature = 0;
    p.prompt_ids = std::vector<int32_t>{1};
    p.max_tokens = 256;
    p.ignore_eos = true;
    auto one = prepare(p);
    ASSERT_TRUE(one.ok());
    prepared.push_back(std::move(*one));
  }
  std::vector<LlamaOutput> outputs = run_batch(*this, *executor_, prepared);
  std::ifstream golden(testing::fixture("llama2c/stories260K_golden_t0.txt"));
  const std::string story = trim(std::string(std::istreambuf_iterator<char>(golden), {}));
  for (const LlamaOutput& o : outputs) {
    EXPECT_EQ(o.ids.size(), 256u);
    EXPECT_EQ(trim(o.text), story);
  }
  EXPECT_GT(executor_->sequences()->preemptions, 0);
  EXPECT_EQ(executor_->sequences()->running, 0);
}

// logprobs: greedy takes the most likely token, whose raw log-probability heads the top list.
TEST_F(LlamaExecutorTest, LogprobsOfGreedyTokensHeadTheirTopLists) {
  LlamaParams p;
  p.sampling.temperature = 0;
  p.max_tokens = 12;
  p.logprobs = 3;
  std::vector<TextDelta> deltas;
  p.on_delta = [&](const TextDelta& d) {
    deltas.push_back(d);
    return true;
  };
  auto one = prepare(p, "Once upon a time");
  ASSERT_TRUE(one.ok());
  std::vector<Prepared> prepared;
  prepared.push_back(std::move(*one));
  const LlamaOutput out = run_batch(*this, *executor_, prepared)[0];
  ASSERT_EQ(out.logprobs.size(), out.ids.size());
  size_t streamed = 0;
  for (const TextDelta& d : deltas) {
    EXPECT_EQ(d.ids.size(), d.logprobs.size());
    streamed += d.ids.size();
  }
  EXPECT_EQ(streamed, out.ids.size());
  for (size_t i = 0; i < out.ids.size(); ++i) {
    const TokenLogprob& lp = out.logprobs[i];
    EXPECT_EQ(lp.id, out.ids[i]);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].first, out.ids[i]);
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_GE(lp.top[1].second, lp.top[2].second);
  }
}

TEST_F(LlamaExecutorTest, BadOptionsAreRefusedByName) {
  EXPECT_FALSE(LlamaExecutor::create_for_server(dir_, {}, {{"block_sise", 16}}).ok());
  EXPECT_FALSE(LlamaExecutor::create_for_server(dir_, {}, {{"block_size", 0}}).ok());
  auto unchunked = LlamaExecutor::create_for_server(
      dir_, {}, {{"enable_chunked_prefill", false}, {"max_num_batched_tokens", 100}});  // max_model_len is 512
  ASSERT_FALSE(unchunked.ok());
  EXPECT_NE(unchunked.status().message().find("max_num_batched_tokens"), std::string::npos);
  auto placement = LlamaExecutor::create_for_server(dir_, {}, {{"embeddings_on_host", "yes"}});
  ASSERT_FALSE(placement.ok());
  EXPECT_NE(placement.status().message().find("embeddings_on_host"), std::string::npos) << placement.status().message();
  auto tiny = LlamaExecutor::create_for_server(dir_, {}, {{"kv_cache_bytes", 1000}});
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("max_model_len"), std::string::npos) << tiny.status().message();
}

// A model longer than the default pool holds (here stories260K told it has 4M positions): with neither
// kv_cache_bytes nor max_model_len given, max_model_len becomes what the 1 GiB default pool holds.
TEST_F(LlamaExecutorTest, TheDefaultPoolCapsALongModelsLength) {
  const std::string dir = dir_ + "_long";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(dir_)) fs::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                                                                  fs::copy_options::overwrite_existing);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  config["max_position_embeddings"] = 4 << 20;
  std::ofstream(dir + "/config.json") << config.dump();
  auto model = models::LlamaModel::load(dir);
  ASSERT_TRUE(model.ok());
  auto executor = LlamaExecutor::create_for_server(dir, {}, nlohmann::json::object());
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  const auto& e = dynamic_cast<const LlamaExecutor&>(**executor);
  const int64_t holds = (int64_t{1} << 30) / ((*model)->kv_bytes_per_token() * 16) * 16;
  EXPECT_EQ(e.max_model_len(), holds);
  EXPECT_LT(e.max_model_len(), 4 << 20);
  // Given explicitly, a length the pool cannot hold is refused with the figures.
  auto given = LlamaExecutor::create_for_server(dir, {}, {{"max_model_len", 4 << 20}});
  ASSERT_FALSE(given.ok());
  EXPECT_NE(given.status().message().find("lower max_model_len"), std::string::npos) << given.status().message();
  fs::remove_all(dir);
}

TEST_F(LlamaExecutorTest, BadRequestsAreRefusedWithAMessage) {
  auto refused = [&](LlamaParams params, const std::string& text, const std::string& needle) {
    auto p = prepare(params, text);
    ASSERT_FALSE(p.ok()) << needle;
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  LlamaParams ids;
  ids.prompt_ids = std::vector<int32_t>{1, 512};
  refused(ids, "", "outside the vocabulary");
  ids.prompt_ids = std::vector<int32_t>(600, 5);
  refused(ids, "", "maximum context length is 512");
  LlamaParams both;
  both.prompt_ids = std::vector<int32_t>{1};
  refused(both, "text too", "exactly one prompt");
  LlamaParams hot;
  hot.sampling.temperature = -1;
  refused(hot, "a", "temperature");
  LlamaParams chat;
  chat.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  refused(chat, "", "has no chat template");  // stories260K has none
  LlamaParams zero;
  zero.max_tokens = 0;
  refused(zero, "a", "max_tokens");
  LlamaParams too_few;
  too_few.max_tokens = 3;
  too_few.min_tokens = 4;
  refused(too_few, "a", "min_tokens");
}

// max_cpu_loras, the host tier's size: a load beyond it is refused (429-class, naming the limit) and changes nothing;
// after an unload the next load fits.
TEST(LlamaExecutorAdapters, MaxCpuLorasBoundsTheLoadedAdapters) {
  const fs::path dir = fs::temp_directory_path() / ("mmserve_cpu_loras_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(testing::fixture(std::string("llama/llama-gqa-f32/") + f), dir / f, fs::copy_options::overwrite_existing);
  }
  fs::copy_file(testing::fixture("llava_servable/tokenizer.json"), dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  LlamaOptions llama;
  llama.max_cpu_loras = 1;
  auto e = LlamaExecutor::create(dir.string(), {}, llama);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE((*e)->load_adapter("qv", testing::fixture("lora/llama-qv-r4")).ok());
  const Status second = (*e)->load_adapter("all", testing::fixture("lora/llama-all-r8-rslora"));
  EXPECT_EQ(second.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(second.message().find("max_cpu_loras 1"), std::string::npos) << second.to_string();
  EXPECT_EQ((*e)->adapter_list().size(), 1u);
  ASSERT_TRUE((*e)->unload_adapter("qv").ok());
  EXPECT_TRUE((*e)->load_adapter("all", testing::fixture("lora/llama-all-r8-rslora")).ok());
  LlamaOptions negative;
  negative.max_cpu_loras = -1;
  EXPECT_EQ(LlamaExecutor::create(dir.string(), {}, negative).status().code(), StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mmserve::engine
