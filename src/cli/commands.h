// The `mmserve` subcommands. Each returns the process exit code: 0 on success, 1 on an error the user
// caused or can fix (the message is printed to stderr), 2 for usage errors (CLI11 prints those).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/executor.h"

namespace mmserve::cli {

struct EmbedArgs {
  std::string model_dir;
  std::vector<std::string> images;
  std::vector<std::string> texts;
  std::string output = "json";
  std::string device = "cpu";
  std::string dtype = "auto";  // auto (f32 on cpu, bf16 on cuda) | f32 | f16 | bf16
  int threads = 0;
  int batch = 64;
  long long max_pixels = 64LL * 1024 * 1024;
  std::string adapter_dir;  // a PEFT LoRA adapter over the model ("" = none)
};
int run_embed(const EmbedArgs& args);

struct TokenizeArgs {
  std::string model_dir;
  std::vector<std::string> texts;
  bool no_special = false;
  bool no_truncation = false;
};
int run_tokenize(const TokenizeArgs& args);

int run_inspect(const std::string& model_dir);
int run_demo_model(const std::string& output_dir, bool overwrite, const std::string& architecture);
// `mmserve convert-llama2c`: models/llama/llama2c.h.
int run_convert_llama2c(const std::string& checkpoint, const std::string& tokenizer, const std::string& output_dir);

// `mmserve serve` (src/cli/serve_command.cpp): runs the HTTP server until SIGTERM/SIGINT, then drains.
struct ServeArgs {
  std::string model_repository;  // empty: the demo CLIP in a temporary repository
  std::string config_file;       // optional YAML with server-wide settings
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> api_keys;  // --api-key, repeatable (tenant "default")
  std::string api_keys_file;          // lines "KEY TENANT"
  std::string policy = "qos";         // fifo | qos
  int http_threads = 0;               // 0 = max(512, 16 x cores): a request holds a worker while it waits
  double max_body_mb = 64;
  long long max_image_pixels = 64LL * 1024 * 1024;
  double drain_timeout_s = 30;
  std::string access_log;           // file for JSON access-log lines; empty = stderr
  std::vector<std::string> models;  // --model NAME: load only these (default: all)
  std::string device;               // --device: every model on this device (default: each model's mmserve.yaml)
  std::vector<std::string> lora_modules;   // --lora-modules NAME=DIR[@MODEL], repeatable (vLLM's)
  bool allow_runtime_lora_updating = false;  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter
};
int run_serve(const ServeArgs& args);

// `mmserve bench` (src/cli/bench_command.cpp): an open-loop (Poisson) load generator against a running server.
struct BenchArgs {
  std::string url = "http://127.0.0.1:8000";
  std::string profile_file;  // YAML/JSON mix of request kinds; empty = the built-in mix
  std::string model;         // default: the server's first model
  double rate = 10;          // requests per second (Poisson arrivals)
  double duration_s = 10;
  int connections = 64;  // concurrent connections at most
  std::string api_key;
  std::string output = "table";  // table | json
  std::string json_file;         // also write the JSON report here
  unsigned seed = 1;
  // --generate: streaming /v1/completions (cli/bench_generate.h) instead of the profile's mix.
  bool generate = false;
  int concurrency = 0;  // closed loop instead of --rate
  std::string prompt, prompt_tokens = "32:128", max_tokens = "32:128", token_ids = "3:512";
  int prefix_tokens = 0;
  double timeout_s = 60;
};
int run_bench(const BenchArgs& args);

// `mmserve transcribe` (src/cli/transcribe_command.cpp): speech to text with a Whisper model directory.
struct TranscribeArgs {
  std::string model_dir;
  std::string file;
  std::string language;             // empty: detected
  std::string task = "transcribe";  // transcribe | translate
  bool no_timestamps = false;
  int beam = 1;
  long long max_new_tokens = 0;  // 0: the model's limit
  double temperature = -1;       // < 0: the fallback schedule 0, 0.2, ..., 1.0
  std::string prompt;
  bool vad = false;
  std::string device = "cpu";
  std::string format = "json";
  int threads = 0;
  std::string dtype = "auto";     // auto (f32 on cpu, f16 on cuda) | f32 | f16 | bf16
  std::string cross_kv = "same";  // cuda: same | fp8_e4m3 | int8
};
int run_transcribe(const TranscribeArgs& args);

// `mmserve segment` (src/cli/segment_command.cpp): SAM masks for one prompt on one image.
struct SegmentArgs {
  std::string model_dir;
  std::string image;
  std::vector<std::string> points;  // "X,Y,LABEL" each, in the image's pixels
  std::string box;                  // "X0,Y0,X1,Y1"
  bool single_mask = false;
  std::string output = "json";
  std::string device = "cpu";
  std::string dtype = "auto";
  int threads = 0;
  long long max_pixels = 64LL * 1024 * 1024;
};
int run_segment(const SegmentArgs& args);

// `mmserve generate` and `mmserve chat-template` (cli/generate_command.cpp).
struct GenerateArgs {
  std::string model_dir;
  std::string prompt, prompt_ids, messages;
  std::vector<std::string> images;  // LLaVA: one file per <image> placeholder, in order
  std::string adapter;              // a PEFT LoRA adapter directory over --model, or "auto" (--gate routes)
  std::string gate;                 // --adapter auto: the gate head (gate.safetensors, gate.json beside it)
  std::vector<std::string> adapters;  // --adapter auto: the adapters the gate names (each named by its folder)
  int max_new_tokens = 16;
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  long long seed = -1;  // < 0: a random seed
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::string device = "cpu";
  std::string dtype = "auto";
  int threads = 0;
  std::string output = "json";
};
int run_generate(const GenerateArgs& args);
struct ChatTemplateArgs {
  std::string model_dir, messages;
  bool no_generation_prompt = false;
};
int run_chat_template(const ChatTemplateArgs& args);

// `mmserve quantize` (cli/quantize_command.cpp, models/quant/quantize.h).
struct QuantizeArgs {
  std::string model_dir, output_dir, data;
  std::string method = "rtn";  // rtn | awq
  std::string format = "awq";  // awq | gptq
  long long group_size = 128;  // 32, 64, 128 or -1
};
int run_quantize(const QuantizeArgs& args);
// The prompts of a JSONL file of {"text": ...} lines, each tokenised with the model's tokenizer as HF's
// tokenizer(text) (quantize --method awq and calibrate read --data with it); errors name the file and line.
StatusOr<std::vector<std::vector<int32_t>>> read_calibration_prompts(const std::string& path,
                                                                     const std::string& model_dir);

// `mmserve calibrate` (cli/calibrate_command.cpp, models/quant/fp8_calibrate.h).
struct CalibrateArgs {
  std::string model_dir, data, output_dir;
  double max_kl = 0.01;
  long long holdout = -1;                    // -1: max(1, 20% of the prompts)
  std::string activation_scheme = "static";  // static | dynamic (per token)
  std::string weight_strategy = "tensor";    // tensor | channel
};
int run_calibrate(const CalibrateArgs& args);

// The executor options of --device, --dtype, --threads and --batch (errors name the flag's value).
StatusOr<engine::ExecutorOptions> executor_options(const std::string& device, const std::string& dtype, int threads,
                                                   int batch);

// Prints "mmserve: error: <message>" to stderr and returns 1.
int fail(const std::string& message);

}  // namespace mmserve::cli
