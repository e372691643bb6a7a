// A Llama-family model (llama2.c's stories260K, converted by convert_llama2c) served by the real InferenceServer:
// a text prompt and a token-id prompt (no input items: the params carry it) give the model's greedy text, the
// generation metrics count the prompt and generated tokens and observe TTFT and TPOT once per request, and a chat
// request on a model without a chat template is kInvalidArgument with a message.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/llama_executor.h"
#include "models/llama/llama2c.h"
#include "server_test_util.h"

namespace mmserve::serving {
namespace {

namespace fs = std::filesystem;
using testing::fixture;
using testing::request;
using testing::text_input;

class LlamaServing : public testing::RepositoryTest {
 protected:
  void add_stories(const std::string& name) {
    ASSERT_TRUE(models::convert_llama2c(fixture("../../assets/llama2c/stories260K.bin"),
                                        fixture("../../assets/llama2c/tok512.bin"), (root_ / name).string())
                    .ok());
  }
};

TEST_F(LlamaServing, CompletionsAndTheirGenerationMetrics) {
  add_stories("stories");
  InferenceServer& server = start();
  auto meta = server.model_metadata("stories");
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  EXPECT_EQ(meta->platform, "mmserve_llama");
  auto params = std::make_shared<engine::LlamaParams>();
  params->sampling.temperature = 0;
  params->max_tokens = 12;
  RequestSpec text = request("stories", {text_input("Once upon a time")});
  text.params = params;
  auto a = server.infer(std::move(text));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const auto* out = engine::output_as<engine::LlamaOutput>(a->output);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->text.rfind(", there was a little girl", 0), 0u) << out->text;
  EXPECT_EQ(out->ids.size(), 12u);
  EXPECT_EQ(a->tokens, 5);  // the prompt: BOS + 4 pieces
  auto ids = std::make_shared<engine::LlamaParams>(*params);
  ids->prompt_ids = out->prompt_ids;
  RequestSpec by_ids = request("stories", {});
  by_ids.params = ids;
  auto b = server.infer(std::move(by_ids));
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(engine::output_as<engine::LlamaOutput>(b->output)->ids, out->ids);
  EXPECT_EQ(counter("mmserve_prompt_tokens_total", {"model"}, {"stories"}), 10);
  EXPECT_EQ(counter("mmserve_generation_tokens_total", {"model"}, {"stories"}), 24);
  EXPECT_EQ(histogram("mmserve_time_to_first_token_seconds", {"model"}, {"stories"}).count(), 2u);
  EXPECT_EQ(histogram("mmserve_time_per_output_token_seconds", {"model"}, {"stories"}).count(), 2u);
  auto chat = std::make_shared<engine::LlamaParams>();
  chat->messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  RequestSpec no_template = request("stories", {});
  no_template.params = chat;
  auto c = server.infer(std::move(no_template));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("has no chat template"), std::string::npos) << c.status().message();
  // A request with neither inputs nor params is still refused by serving.
  auto empty = server.infer(request("stories", {}));
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

// Continuous batching: a short request submitted while a long one runs joins the running batch between steps and
// finishes first, and both get exactly the tokens they get alone.
TEST_F(LlamaServing, AShortRequestJoinsARunningBatchAndFinishesFirst) {
  add_stories("stories");
  InferenceServer& server = start();
  auto params = [](int64_t max_tokens) {
    auto p = std::make_shared<engine::LlamaParams>();
    p->sampling.temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = true;
    p->prompt_ids = std::vector<int32_t>{1};
    return p;
  };
  auto alone = [&](int64_t max_tokens) {
    RequestSpec spec = request("stories", {});
    spec.params = params(max_tokens);
    auto r = server.infer(std::move(spec));
    EXPECT_TRUE(r.ok());
    return engine::output_as<engine::LlamaOutput>(r->output)->ids;
  };
  const std::vector<int32_t> long_ids = alone(400), short_ids = alone(3);
  std::mutex mutex;
  std::condition_variable done;
  std::vector<std::string> order;
  std::vector<std::vector<int32_t>> got(2);
  auto submit = [&](int which, int64_t max_tokens) {
    RequestSpec spec = request("stories", {});
    spec.params = params(max_tokens);
    server.submit(std::move(spec), [&, which](StatusOr<ResponseData> r) {
      std::lock_guard<std::mutex> lock(mutex);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      got[which] = engine::output_as<engine::LlamaOutput>(r->output)->ids;
      order.push_back(which == 0 ? "long" : "short");
      done.notify_all();
    });
  };
  submit(0, 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the long one is running (400 steps take longer)
  submit(1, 3);
  std::unique_lock<std::mutex> lock(mutex);
  ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return order.size() == 2; }));
  EXPECT_EQ(order, (std::vector<std::string>{"short", "long"}));
  EXPECT_EQ(got[0], long_ids);
  EXPECT_EQ(got[1], short_ids);
}

}  // namespace
}  // namespace mmserve::serving
