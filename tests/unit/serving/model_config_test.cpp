// Tests of the YAML configs (model_config.cpp): a model's mmserve.yaml and the server-wide file. Every key is
// set once to a non-default value and read back; defaults hold for missing keys and missing files; each
// kind of error (syntax, unknown key, wrong type, every range rule) is kInvalidArgument naming file and key.
#include "serving/model_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "serving/inference_server.h"

namespace mmserve::serving {
namespace {

constexpr const char* kLabel = "models/m/mmserve.yaml";

TEST(ModelConfig, EveryKeyIsRead) {
  auto c = parse_model_config(R"(
device: cpu
dtype: f32
instances: 2
max_batch_size: 8
batch_buckets: [1, 4, 8]
max_queue_delay_ms: 2.5
queue_size: 17
priority_levels: 5
default_priority: 4
default_timeout_ms: 1500
memory_quota_mb: 300
threads: 3
preempt_chunk_ms: 4.5
audio_seconds_max: 600.5
audio_bytes_max: 1048576
cross_kv: int8
decoder_rows: 24
)",
                              kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->device, "cpu");
  EXPECT_EQ(c->dtype, "f32");
  EXPECT_EQ(c->instances, 2);
  EXPECT_EQ(c->max_batch_size, 8);
  EXPECT_EQ(c->batch_buckets, (std::vector<int>{1, 4, 8}));
  EXPECT_DOUBLE_EQ(c->max_queue_delay_ms, 2.5);
  EXPECT_EQ(c->queue_size, 17);
  EXPECT_EQ(c->priority_levels, 5);
  EXPECT_EQ(c->default_priority, 4);
  EXPECT_DOUBLE_EQ(c->default_timeout_ms, 1500);
  EXPECT_EQ(c->memory_quota_mb, 300);
  EXPECT_EQ(c->threads, 3);
  EXPECT_EQ(c->preempt_chunk_ms, 4.5);
  EXPECT_DOUBLE_EQ(c->audio_seconds_max, 600.5);
  EXPECT_EQ(c->audio_bytes_max, 1048576);
  EXPECT_EQ(c->cross_kv, "int8");
  EXPECT_EQ(c->decoder_rows, 24);
}

TEST(ModelConfig, DevicesSpreadReplicasRoundRobin) {
  auto c = parse_model_config("devices: [cuda:0, cuda:1]\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->devices, (std::vector<std::string>{"cuda:0", "cuda:1"}));
  auto placed = replica_devices(*c, 0, kLabel);  // no GPU needed to place: only cuda:all counts them
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(*placed, (std::vector<Device>{Device::cuda(0), Device::cuda(1)}));  // instances default: one each

  c = parse_model_config("devices: [cuda:1, cpu]\ninstances: 5\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  placed = replica_devices(*c, 0, kLabel);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(*placed,
            (std::vector<Device>{Device::cuda(1), Device::cpu(), Device::cuda(1), Device::cpu(), Device::cuda(1)}));

  c = parse_model_config("device: cuda:all\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  placed = replica_devices(*c, 3, kLabel);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(*placed, (std::vector<Device>{Device::cuda(0), Device::cuda(1), Device::cuda(2)}));
  placed = replica_devices(*c, 0, kLabel);
  EXPECT_EQ(placed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(placed.status().message().find("no CUDA device is visible"), std::string::npos);

  c = parse_model_config("device: cuda:all\ninstances: 1\n", kLabel);  // fine with one GPU, not with two
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(replica_devices(*c, 1, kLabel).ok());
  placed = replica_devices(*c, 2, kLabel);
  EXPECT_EQ(placed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(placed.status().message().find("instances"), std::string::npos) << placed.status().to_string();

  c = parse_model_config("device: cpu\ninstances: 3\n", kLabel);  // one device, several instances
  ASSERT_TRUE(c.ok());
  placed = replica_devices(*c, 0, kLabel);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(*placed, (std::vector<Device>(3, Device::cpu())));

  ModelConfig by_hand;  // built in code: validate catches both keys set
  by_hand.device = "cuda:0";
  by_hand.devices = {"cuda:1"};
  EXPECT_EQ(validate_model_config(by_hand, kLabel).code(), StatusCode::kInvalidArgument);
}

TEST(ModelConfig, EmptyTextGivesTheHeaderDefaults) {
  for (const char* text : {"", "# only a comment\n", "---\n"}) {
    auto c = parse_model_config(text, kLabel);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().to_string();
    EXPECT_EQ(c->device, "cpu");
    EXPECT_EQ(c->dtype, "auto");
    EXPECT_EQ(c->instances, 0);  // one per device: one replica on cpu
    EXPECT_TRUE(c->devices.empty());
    EXPECT_EQ(c->max_batch_size, 64);
    EXPECT_EQ(c->batch_buckets, (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
    EXPECT_DOUBLE_EQ(c->max_queue_delay_ms, 5.0);
    EXPECT_EQ(c->queue_size, 256);
    EXPECT_EQ(c->priority_levels, 3);
    EXPECT_EQ(c->default_priority, 2);
    EXPECT_DOUBLE_EQ(c->default_timeout_ms, 0);
    EXPECT_EQ(c->memory_quota_mb, 0);
    EXPECT_EQ(c->threads, 0);
    EXPECT_DOUBLE_EQ(c->audio_seconds_max, 7200);  // 2 h
    EXPECT_EQ(c->audio_bytes_max, 256LL << 20);
  }
}

TEST(ModelConfig, TensorParallelCutsTheDevicesIntoGroups) {
  using Groups = std::vector<std::vector<Device>>;
  auto c = parse_model_config("devices: [cuda:0, cuda:1, cuda:2, cuda:3]\ntensor_parallel: 2\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->tensor_parallel, 2);
  auto groups = replica_groups(*c, 0, kLabel);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  EXPECT_EQ(*groups, (Groups{{Device::cuda(0), Device::cuda(1)}, {Device::cuda(2), Device::cuda(3)}}));

  c = parse_model_config("device: cuda:all\ntensor_parallel: 2\ninstances: 3\n", kLabel);  // groups round-robin
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  groups = replica_groups(*c, 2, kLabel);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  EXPECT_EQ(*groups, (Groups(3, {Device::cuda(0), Device::cuda(1)})));
  // With one visible GPU, cuda:all cannot make a group of two: an error saying how many were listed.
  groups = replica_groups(*c, 1, kLabel);
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("1 device(s) listed"), std::string::npos) << groups.status().to_string();

  // Without tensor parallel every replica is a group of one, as replica_devices places them.
  c = parse_model_config("devices: [cuda:1, cpu]\ninstances: 3\n", kLabel);
  ASSERT_TRUE(c.ok());
  groups = replica_groups(*c, 0, kLabel);
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(*groups, (Groups{{Device::cuda(1)}, {Device::cpu()}, {Device::cuda(1)}}));

  // Pipeline stages are grouped the same way.
  c = parse_model_config("devices: [cuda:0, cuda:1]\npipeline_parallel: 2\nvision_micro_batch: 16\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->vision_micro_batch, 16);
  EXPECT_EQ(c->text_micro_batch, 4);
  groups = replica_groups(*c, 0, kLabel);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  EXPECT_EQ(*groups, (Groups{{Device::cuda(0), Device::cuda(1)}}));

  // A group needs distinct GPUs, and no CPU.
  for (const char* yaml : {"devices: [cuda:0, cuda:0]\ntensor_parallel: 2\n",
                           "devices: [cuda:0, cpu]\ntensor_parallel: 2\n", "device: cuda:0\ntensor_parallel: 2\n"}) {
    c = parse_model_config(yaml, kLabel);
    ASSERT_TRUE(c.ok()) << yaml << c.status().to_string();
    groups = replica_groups(*c, 2, kLabel);
    EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument) << yaml;
    EXPECT_NE(groups.status().message().find("tensor_parallel"), std::string::npos) << groups.status().to_string();
  }
  EXPECT_NE(replica_groups(*parse_model_config("devices: [cuda:0, cuda:0]\ntensor_parallel: 2\n", kLabel), 1, kLabel)
                .status()
                .message()
                .find("tp_collective: staged"),
            std::string::npos)
      << "the error names the setting that allows it";

  // tp_collective: staged lets a group repeat a GPU (its sums go through host memory), for TP and pipeline alike;
  // still no CPU in a group.
  for (const char* key : {"tensor_parallel", "pipeline_parallel"}) {
    c = parse_model_config(std::string("devices: [cuda:0, cuda:0]\ntp_collective: staged\n") + key + ": 2\n", kLabel);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->tp_collective, "staged");
    groups = replica_groups(*c, 1, kLabel);
    ASSERT_TRUE(groups.ok()) << key << ": " << groups.status().to_string();
    EXPECT_EQ(*groups, (Groups{{Device::cuda(0), Device::cuda(0)}})) << key;
  }
  c = parse_model_config("devices: [cuda:0, cpu]\ntensor_parallel: 2\ntp_collective: staged\n", kLabel);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(replica_groups(*c, 1, kLabel).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_model_config("", kLabel)->tp_collective, "nccl");
  auto bad = parse_model_config("tp_collective: mpi\n", kLabel);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tp_collective"), std::string::npos) << bad.status().to_string();
  EXPECT_NE(bad.status().message().find("nccl, staged"), std::string::npos) << bad.status().to_string();
}

TEST(ModelConfig, MaxBatchSizeWithoutBucketsGetsBucketsThatReachIt) {
  auto c = parse_model_config("max_batch_size: 100\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->batch_buckets, (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 100}));
  c = parse_model_config("max_batch_size: 1\n", kLabel);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->batch_buckets, (std::vector<int>{1}));
}

TEST(ModelConfig, LoadReadsTheFileOrFallsBackToDefaults) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("mmserve_model_config_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto defaults = load_model_config(dir.string());
  ASSERT_TRUE(defaults.ok()) << defaults.status().to_string();
  EXPECT_EQ(defaults->max_batch_size, 64);

  std::ofstream(dir / "mmserve.yaml") << "queue_size: 3\nbogus: 1\n";
  auto bad = load_model_config(dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find((dir / "mmserve.yaml").string()), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("bogus"), std::string::npos);

  std::ofstream(dir / "mmserve.yaml") << "queue_size: 3\n";
  auto good = load_model_config(dir.string());
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(good->queue_size, 3);
  std::filesystem::remove_all(dir);
}

struct BadCase {
  const char* yaml;
  const char* must_mention;  // the key (or the problem) the message must name
};
void PrintTo(const BadCase& c, std::ostream* os) {  // NOLINT(readability-identifier-naming): gtest hook
  *os << c.must_mention;
}

class ModelConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ModelConfigErrors, AreInvalidArgumentNamingFileAndKey) {
  auto c = parse_model_config(GetParam().yaml, kLabel);
  ASSERT_FALSE(c.ok()) << GetParam().yaml;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
  EXPECT_NE(c.status().message().find(kLabel), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find(GetParam().must_mention), std::string::npos) << c.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ModelConfigErrors,
    ::testing::Values(
        BadCase{"max_batch_size: [1\n", "invalid YAML"},     // syntax
        BadCase{"- a\n- b\n", "top level"},                  // not a map
        BadCase{"max_batch: 4\n", "max_batch"},              // unknown key
        BadCase{"max_batch_size: big\n", "max_batch_size"},  // wrong type
        BadCase{"max_batch_size: 4.5\n", "max_batch_size"},  // not an integer
        BadCase{"max_batch_size: [4]\n", "max_batch_size"},  // list for a scalar
        BadCase{"device: [cpu]\n", "device"},                // list for a string
        BadCase{"max_queue_delay_ms: soon\n", "max_queue_delay_ms"},
        BadCase{"max_queue_delay_ms: .inf\n", "max_queue_delay_ms"},
        BadCase{"batch_buckets: 4\n", "batch_buckets"},  // scalar for a list
        BadCase{"batch_buckets: [1, x]\n", "batch_buckets[1]"}, BadCase{"device: tpu\n", "device"},
        BadCase{"dtype: f64\n", "dtype"}, BadCase{"instances: -1\n", "instances"},
        BadCase{"max_batch_size: 0\n", "max_batch_size"}, BadCase{"batch_buckets: [2, 1, 64]\n", "strictly increasing"},
        BadCase{"batch_buckets: [1, 1, 64]\n", "strictly increasing"},
        BadCase{"batch_buckets: [0, 64]\n", "batch_buckets"}, BadCase{"batch_buckets: []\n", "batch_buckets"},
        BadCase{"max_batch_size: 16\nbatch_buckets: [1, 8]\n", "below max_batch_size"},
        BadCase{"max_queue_delay_ms: -1\n", "max_queue_delay_ms"}, BadCase{"queue_size: 0\n", "queue_size"},
        BadCase{"priority_levels: 0\n", "priority_levels"}, BadCase{"priority_levels: 1000\n", "priority_levels"},
        BadCase{"default_priority: 4\n", "default_priority"},  // above the default 3 levels
        BadCase{"default_priority: 0\n", "default_priority"}, BadCase{"default_timeout_ms: -5\n", "default_timeout_ms"},
        BadCase{"memory_quota_mb: -1\n", "memory_quota_mb"}, BadCase{"threads: -2\n", "threads"},
        BadCase{"preempt_chunk_ms: -1\n", "preempt_chunk_ms"},
        BadCase{"audio_seconds_max: 0\n", "audio_seconds_max"}, BadCase{"audio_seconds_max: x\n", "audio_seconds_max"},
        BadCase{"audio_bytes_max: 0\n", "audio_bytes_max"}, BadCase{"audio_bytes_max: 1.5\n", "audio_bytes_max"},
        BadCase{"cross_kv: fp4\n", "cross_kv"}, BadCase{"instances: 99999999999\n", "instances"},  // beyond int
        BadCase{"decoder_rows: 4\n", "decoder_rows"}, BadCase{"decoder_rows: -1\n", "decoder_rows"},
        BadCase{"decoder_rows: 5000\n", "decoder_rows"}, BadCase{"tp_collective: gloo\n", "tp_collective"},
        // Replicas: the two device keys are exclusive, lists must hold devices, and every device gets a replica.
        BadCase{"device: cuda:0\ndevices: [cuda:0, cuda:1]\n", "'device' and 'devices' are exclusive"},
        BadCase{"device: cpu\ndevices: [cpu]\n", "'device' and 'devices' are exclusive"},
        BadCase{"devices: []\n", "devices"}, BadCase{"devices: cpu\n", "devices"},
        BadCase{"devices: [cpu, tpu]\n", "devices[1]"}, BadCase{"devices: [cpu, [cpu]]\n", "devices[1]"},
        BadCase{"devices: [cuda:all]\n", "cuda:all goes in 'device'"},
        BadCase{"devices: [cpu, cpu, cpu]\ninstances: 2\n", "instances"}, BadCase{"device: cuda:any\n", "device"},
        // Tensor parallel: 1..8 GPUs per replica, and `instances` counts groups.
        BadCase{"tensor_parallel: 0\n", "tensor_parallel"}, BadCase{"tensor_parallel: 9\n", "tensor_parallel"},
        BadCase{"tensor_parallel: two\n", "tensor_parallel"},
        BadCase{"devices: [cuda:0, cuda:1, cuda:2, cuda:3]\ntensor_parallel: 2\ninstances: 1\n", "groups of 2"},
        // Pipeline parallel: 2 stages, not combined with tensor parallel, positive micro-batches.
        BadCase{"pipeline_parallel: 3\n", "pipeline_parallel"},
        BadCase{"pipeline_parallel: 2\ntensor_parallel: 2\n", "cannot be combined"},
        BadCase{"vision_micro_batch: 0\n", "vision_micro_batch"},
        BadCase{"text_micro_batch: -1\n", "text_micro_batch"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      std::string name = std::to_string(info.index) + "_";
      for (const char* c = info.param.must_mention; *c; ++c)
        name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
      return name;
    });

TEST(ServerConfig, EveryKeyIsRead) {
  auto c = parse_server_config(R"(
model_repository: /models
models_to_load: [a, b.c]
policy: fifo
aging_ms_per_level: 250
preprocess_threads: 3
preprocess_queue: 9
background_nice: 5
max_image_pixels: 1000000
qos: {image: 0.5, audio: 0.3, text: 0.2, image_tokens_max: 1024, audio_seconds_max: 30, text_chars_max: 256}
)",
                               "server.yaml");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_repository, "/models");
  EXPECT_EQ(c->models_to_load, (std::vector<std::string>{"a", "b.c"}));
  EXPECT_EQ(c->policy, SchedulingPolicy::kFifo);
  EXPECT_DOUBLE_EQ(c->aging_ms_per_level, 250);
  EXPECT_EQ(c->preprocess_threads, 3);
  EXPECT_EQ(c->preprocess_queue, 9);
  EXPECT_EQ(c->background_nice, 5);
  EXPECT_EQ(c->max_image_pixels, 1000000);
  EXPECT_DOUBLE_EQ(c->qos.image, 0.5);
  EXPECT_DOUBLE_EQ(c->qos.audio, 0.3);
  EXPECT_DOUBLE_EQ(c->qos.text, 0.2);
  EXPECT_DOUBLE_EQ(c->qos.image_tokens_max, 1024);
  EXPECT_DOUBLE_EQ(c->qos.audio_seconds_max, 30);
  EXPECT_DOUBLE_EQ(c->qos.text_chars_max, 256);
}

TEST(ServerConfig, DefaultsAndErrors) {
  auto d = parse_server_config("", "server.yaml");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->policy, SchedulingPolicy::kQos);
  EXPECT_DOUBLE_EQ(d->aging_ms_per_level, 500);
  EXPECT_EQ(d->preprocess_queue, 1024);
  EXPECT_EQ(d->background_nice, 10);
  EXPECT_DOUBLE_EQ(d->qos.image, 0.4);

  const std::pair<const char*, const char*> bad[] = {
      {"policy: lifo\n", "policy"},
      {"qos: {image: 0.4, videos: 1}\n", "qos.videos"},
      {"qos: 3\n", "qos"},
      {"qos: {text_chars_max: 0}\n", "qos.text_chars_max"},
      {"qos: {audio: -0.1}\n", "qos.audio"},
      {"aging_ms_per_level: -1\n", "aging_ms_per_level"},
      {"preprocess_queue: 0\n", "preprocess_queue"},
      {"background_nice: 20\n", "background_nice"},
      {"background_nice: -1\n", "background_nice"},
      {"max_image_pixels: 0\n", "max_image_pixels"},
      {"models_to_load: a\n", "models_to_load"},
      {"model_repo: /x\n", "model_repo"},
  };
  for (const auto& [yaml, key] : bad) {
    auto c = parse_server_config(yaml, "server.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("server.yaml"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().message();
  }
  auto missing = load_server_config("/nonexistent/mmserve-server.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace mmserve::serving

namespace mmserve::serving {
namespace {

// A family's options nested past 32 levels, or an alias inside its own anchor (a cycle in yaml-cpp's tree: found by
// model_config_fuzz as a stack overflow), are refused with a message instead of recursing.
TEST(ModelConfig, DeepOrSelfReferentialOptionsAreRefused) {
  std::string deep = "options: ";
  for (int i = 0; i < 40; ++i) deep += "{a: ";
  deep += "1";
  for (int i = 0; i < 40; ++i) deep += "}";
  auto c = parse_model_config(deep + "\n", "m/mmserve.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("32 levels"), std::string::npos) << c.status().message();
  auto self = parse_model_config("options: &a {x: *a}\n", "m/mmserve.yaml");
  if (!self.ok()) EXPECT_EQ(self.status().code(), StatusCode::kInvalidArgument) << self.status().message();
  auto ok = parse_model_config("options: {a: {b: [1, 2, {c: 3}]}}\n", "m/mmserve.yaml");
  EXPECT_TRUE(ok.ok()) << ok.status().to_string();
}

}  // namespace
}  // namespace mmserve::serving
