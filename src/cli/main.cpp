// `mmserve`: the command-line entry point. Parses arguments with CLI11 and dispatches to the subcommands in
// commands.h; no logic of its own. Tests: tests/e2e/cli_test.sh-style checks in tests/e2e/cli_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/common/blas_core.h"

int main(int argc, char** argv) {
  using namespace mmserve::cli;
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);  // before any work: OpenBLAS reads it at load
  CLI::App app{"mmserve: a multimodal inference server (CLIP embeddings, Whisper speech to text, SAM segmentation)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mmserve 0.1.0");

  EmbedArgs embed;
  CLI::App* embed_cmd = app.add_subcommand("embed", "Embed images and texts with a CLIP model (normalised, as HF)");
  embed_cmd->add_option("--model", embed.model_dir, "HF CLIP model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  embed_cmd->add_option("--image", embed.images, "image file (JPEG, PNG, WebP); repeatable");
  embed_cmd->add_option("--text", embed.texts, "text; repeatable")->allow_extra_args(false);
  embed_cmd->add_option("--output", embed.output, "output format")->check(CLI::IsMember({"json"}));
  embed_cmd->add_option("--device", embed.device, "cpu, cuda or cuda:N");
  embed_cmd->add_option("--dtype", embed.dtype, "compute dtype: auto (f32 on cpu, bf16 on cuda), f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  embed_cmd->add_option("--threads", embed.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  embed_cmd->add_option("--batch", embed.batch, "largest batch run at once")->check(CLI::PositiveNumber);
  embed_cmd->add_option("--max-pixels", embed.max_pixels, "refuse images with more pixels (decompression bombs)")
      ->check(CLI::PositiveNumber);
  embed_cmd->add_option("--adapter", embed.adapter_dir, "a PEFT LoRA adapter directory over --model (its towers)")
      ->check(CLI::ExistingDirectory);

  TokenizeArgs tokenize;
  CLI::App* tok_cmd = app.add_subcommand("tokenize", "Print the token ids of texts, as HF's tokenizer gives them");
  tok_cmd->add_option("--model", tokenize.model_dir, "HF model directory")->required()->check(CLI::ExistingDirectory);
  tok_cmd->add_option("--text", tokenize.texts, "text; repeatable")->required();
  tok_cmd->add_flag("--no-special", tokenize.no_special, "add no BOS/EOS (special-token text is still recognised)");
  tok_cmd->add_flag("--no-truncation", tokenize.no_truncation, "do not truncate to the model's maximum length");

  std::string inspect_dir;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Architecture, dtypes, parameter count and memory of a model");
  inspect_cmd->add_option("--model", inspect_dir, "HF model directory")->required()->check(CLI::ExistingDirectory);

  std::string demo_dir;
  bool overwrite = false;
  CLI::App* demo_cmd = app.add_subcommand("demo-model", "Write the built-in demo CLIP (random weights) to a directory");
  demo_cmd->add_option("--output", demo_dir, "directory to write")->required();
  demo_cmd->add_flag("--overwrite", overwrite, "replace an existing directory's files");
  std::string demo_architecture = "small";
  demo_cmd
      ->add_option("--architecture", demo_architecture,
                   "small (the demo CLIP), vit-b32 (CLIP for benchmarks) or sam (the demo SAM)")
      ->check(CLI::IsMember({"small", "vit-b32", "sam"}));

  std::string l2c_checkpoint, l2c_tokenizer, l2c_output;
  CLI::App* l2c_cmd = app.add_subcommand(
      "convert-llama2c", "Convert a llama2.c checkpoint and tokenizer (run.c's format) into an HF Llama directory");
  l2c_cmd->add_option("--checkpoint", l2c_checkpoint, "llama2.c model file (e.g. stories260K.bin)")
      ->required()
      ->check(CLI::ExistingFile);
  l2c_cmd->add_option("--tokenizer", l2c_tokenizer, "llama2.c tokenizer file (e.g. tok512.bin)")
      ->required()
      ->check(CLI::ExistingFile);
  l2c_cmd->add_option("--output", l2c_output, "directory to write")->required();

  GenerateArgs generate;
  CLI::App* generate_cmd =
      app.add_subcommand("generate", "Generate text with a decoder (Llama, Mistral, Qwen2, Qwen3, Mixtral, LLaVA)");
  generate_cmd->add_option("--model", generate.model_dir, "HF model directory")->required()->check(CLI::ExistingDirectory);
  generate_cmd->add_option("--prompt", generate.prompt, "prompt text (tokenised as HF's tokenizer(text))");
  generate_cmd->add_option("--prompt-ids", generate.prompt_ids, "prompt token ids I,J,... (used as given)");
  generate_cmd->add_option("--messages", generate.messages,
                           "a JSON file of chat messages (the model's chat template; image_url parts may be data URLs "
                           "or local paths)");
  generate_cmd->add_option("--image", generate.images,
                           "LLaVA: an image file for each <image> in --prompt, in order (repeatable)")
      ->check(CLI::ExistingFile);
  generate_cmd->add_option("--adapter", generate.adapter,
                           "a PEFT LoRA adapter directory applied over --model, or auto (routed by --gate)");
  generate_cmd->add_option("--gate", generate.gate, "--adapter auto: the gate head's gate.safetensors")
      ->check(CLI::ExistingFile);
  generate_cmd->add_option("--adapters", generate.adapters,
                           "--adapter auto: the adapter directories the gate names (repeatable; named by folder)")
      ->check(CLI::ExistingDirectory);
  generate_cmd->add_option("--max-new-tokens", generate.max_new_tokens, "most tokens to generate")
      ->check(CLI::PositiveNumber);
  generate_cmd->add_option("--temperature", generate.temperature, "0 is plain greedy (default 1)");
  generate_cmd->add_option("--top-p", generate.top_p, "nucleus sampling mass in (0, 1]");
  generate_cmd->add_option("--top-k", generate.top_k, "sample among the k most likely (0: all)");
  generate_cmd->add_option("--seed", generate.seed, "seed of the sampler (same seed, same text)");
  generate_cmd->add_option("--stop", generate.stop, "stop when the text contains this (repeatable; not included)");
  generate_cmd->add_flag("--ignore-eos", generate.ignore_eos, "do not stop at the end-of-sequence token");
  generate_cmd->add_option("--device", generate.device, "cpu or cuda:N");
  generate_cmd->add_option("--dtype", generate.dtype, "compute dtype: auto (f32 on cpu, bf16 on cuda), f32, f16, bf16");
  generate_cmd->add_option("--threads", generate.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  generate_cmd->add_option("--output", generate.output, "output format")->check(CLI::IsMember({"json", "text"}));
  ChatTemplateArgs chat;
  CLI::App* chat_cmd = app.add_subcommand("chat-template", "Render chat messages with a model's chat template, as HF");
  chat_cmd->add_option("--model", chat.model_dir, "HF model directory")->required()->check(CLI::ExistingDirectory);
  chat_cmd->add_option("--messages", chat.messages, "a JSON file of chat messages")->required()->check(CLI::ExistingFile);
  chat_cmd->add_flag("--no-generation-prompt", chat.no_generation_prompt, "add_generation_prompt=False");

  QuantizeArgs quantize;
  CLI::App* quantize_cmd = app.add_subcommand(
      "quantize", "Write a W4A16 checkpoint (AWQ GEMM or GPTQ format) of a decoder (Llama, Mistral, Qwen2/3, Mixtral)");
  quantize_cmd->add_option("--model", quantize.model_dir, "HF model directory (f32, f16 or bf16)")
      ->required()
      ->check(CLI::ExistingDirectory);
  quantize_cmd->add_option("--output", quantize.output_dir, "directory to write")->required();
  quantize_cmd->add_option("--method", quantize.method, "rtn (round to nearest) or awq (activation-aware, --data)");
  quantize_cmd->add_option("--format", quantize.format, "awq (AutoAWQ's GEMM) or gptq (v1, sym false)");
  quantize_cmd->add_option("--group-size", quantize.group_size, "inputs per scale: 32, 64, 128 or -1 (one group)");
  quantize_cmd->add_option("--data", quantize.data, "--method awq: calibration prompts, JSONL {\"text\": ...}")
      ->check(CLI::ExistingFile);

  CalibrateArgs calibrate;
  CLI::App* calibrate_cmd = app.add_subcommand(
      "calibrate", "Write an FP8 checkpoint (compressed-tensors) of a decoder when its KL on held-apart prompts is small");
  calibrate_cmd->add_option("--model", calibrate.model_dir, "HF model directory (f32, f16 or bf16)")
      ->required()
      ->check(CLI::ExistingDirectory);
  calibrate_cmd->add_option("--data", calibrate.data, "calibration prompts, JSONL {\"text\": ...}")
      ->required()
      ->check(CLI::ExistingFile);
  calibrate_cmd->add_option("--output", calibrate.output_dir, "directory to write")->required();
  calibrate_cmd->add_option("--max-kl", calibrate.max_kl, "largest mean KL(p_orig || p_fp8) accepted (0.01)");
  calibrate_cmd->add_option("--holdout", calibrate.holdout, "prompts held apart for the KL (default 20%, at least 1)");
  calibrate_cmd->add_option("--activation-scheme", calibrate.activation_scheme, "static (input_scale) or dynamic (per token)");
  calibrate_cmd->add_option("--weight-strategy", calibrate.weight_strategy, "tensor or channel weight scales");

  // ---- serve (options owned by src/cli/serve_command.cpp's author: add flags only inside this block) ----
  ServeArgs serve;
  CLI::App* serve_cmd = app.add_subcommand("serve", "Run the HTTP server (KServe v2 + OpenAI APIs, /metrics)");
  serve_cmd->add_option("--model-repository", serve.model_repository, "directory of model directories")
      ->check(CLI::ExistingDirectory);
  serve_cmd->add_option("--config", serve.config_file, "server configuration YAML")->check(CLI::ExistingFile);
  serve_cmd->add_option("--host", serve.host, "address to listen on");
  serve_cmd->add_option("--port", serve.port, "port to listen on")->check(CLI::Range(0, 65535));
  serve_cmd->add_option("--api-key", serve.api_keys, "accepted API key, tenant 'default' (repeatable)");
  serve_cmd->add_option("--api-keys-file", serve.api_keys_file, "file of 'KEY TENANT' lines")->check(CLI::ExistingFile);
  serve_cmd->add_option("--policy", serve.policy, "scheduling policy")->check(CLI::IsMember({"fifo", "qos"}));
  serve_cmd->add_option("--http-threads", serve.http_threads,
                        "HTTP worker threads (0 = max(512, 16 x cores); a waiting request holds one)");
  serve_cmd->add_option("--max-body-mb", serve.max_body_mb, "largest request body in MiB (413 above)");
  serve_cmd->add_option("--max-image-pixels", serve.max_image_pixels, "refuse larger images (413)");
  serve_cmd->add_option("--drain-timeout", serve.drain_timeout_s, "seconds to finish in-flight work on SIGTERM");
  serve_cmd->add_option("--access-log", serve.access_log, "file for JSON access-log lines, appended (default stderr)");
  serve_cmd->add_option("--model", serve.models, "load only these models (repeatable)");
  serve_cmd->add_option("--device", serve.device,
                        "run every model on this device: cpu, cuda or cuda:N (default: each model's mmserve.yaml)");
  serve_cmd->add_option("--lora-modules", serve.lora_modules,
                        "a PEFT LoRA adapter NAME=DIR (repeatable), on the one model that takes adapters or on "
                        "NAME=DIR@MODEL; requests name it as their model");
  serve_cmd->add_flag("--allow-runtime-lora-updating", serve.allow_runtime_lora_updating,
                      "serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (they read any directory the "
                      "server can)");
  // ---- end serve ----

  // ---- bench (options owned by src/cli/bench_command.cpp's author: add flags only inside this block) ----
  BenchArgs bench;
  CLI::App* bench_cmd = app.add_subcommand("bench", "Open-loop load generator against a running server");
  bench_cmd->add_option("--url", bench.url, "server base URL");
  bench_cmd
      ->add_option("--profile", bench.profile_file,
                   "request mix, YAML or JSON (docs/load-testing.md); default: "
                   "60% text / 30% image / 10% large image")
      ->check(CLI::ExistingFile);
  bench_cmd->add_option("--model", bench.model, "model name (default: the first of GET /v1/models)");
  bench_cmd->add_option("--rate", bench.rate, "requests per second (Poisson)")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--duration", bench.duration_s, "seconds")->check(CLI::PositiveNumber);
  bench_cmd
      ->add_option("--connections", bench.connections,
                   "concurrent connections; arrivals finding none free are "
                   "counted as dropped by the client")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--api-key", bench.api_key, "API key");
  bench_cmd->add_option("--output", bench.output, "table or json")->check(CLI::IsMember({"table", "json"}));
  bench_cmd->add_option("--json-file", bench.json_file, "also write the JSON report here");
  bench_cmd->add_option("--seed", bench.seed, "random seed");
  bench_cmd->add_flag("--generate", bench.generate,
                      "generation profile: streaming /v1/completions, TTFT / inter-token latency / tokens per s");
  bench_cmd->add_option("--concurrency", bench.concurrency, "--generate: closed loop with N clients (not --rate)")
      ->check(CLI::PositiveNumber);
  bench_cmd->add_option("--prompt-tokens", bench.prompt_tokens, "--generate: random prompt ids per request, N or MIN:MAX");
  bench_cmd->add_option("--prefix-tokens", bench.prefix_tokens, "--generate: the same K random ids first in every prompt");
  bench_cmd->add_option("--token-ids", bench.token_ids, "--generate: ids drawn from [MIN, MAX) (default 3:512)");
  bench_cmd->add_option("--prompt", bench.prompt, "--generate: this text as every prompt instead of random ids");
  bench_cmd->add_option("--max-tokens", bench.max_tokens, "--generate: max_tokens per request, N or MIN:MAX");
  bench_cmd->add_option("--timeout", bench.timeout_s, "--generate: seconds per read and for the drain (default 60)")
      ->check(CLI::PositiveNumber);
  // ---- end bench ----

  TranscribeArgs transcribe;
  CLI::App* transcribe_cmd =
      app.add_subcommand("transcribe", "Speech to text with a Whisper model (WAV, FLAC, Ogg, MP3)");
  transcribe_cmd->add_option("--model", transcribe.model_dir, "HF Whisper model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  transcribe_cmd->add_option("file", transcribe.file, "audio file")->required();
  transcribe_cmd->add_option("--language", transcribe.language, "language code or name (default: detected)");
  transcribe_cmd->add_option("--task", transcribe.task, "transcribe or translate (to English)")
      ->check(CLI::IsMember({"transcribe", "translate"}));
  transcribe_cmd->add_flag("--no-timestamps", transcribe.no_timestamps,
                           "decode without timestamps (one segment a window)");
  transcribe_cmd->add_option("--beam", transcribe.beam, "beam size (1 = greedy)")->check(CLI::Range(1, 64));
  transcribe_cmd
      ->add_option("--max-new-tokens", transcribe.max_new_tokens, "tokens per 30 s window (0 = the model's limit)")
      ->check(CLI::NonNegativeNumber);
  transcribe_cmd
      ->add_option("--temperature", transcribe.temperature,
                   "one sampling temperature (default: the fallback schedule 0, 0.2, ..., 1.0)")
      ->check(CLI::Range(0.0, 2.0));
  transcribe_cmd->add_option("--prompt", transcribe.prompt, "initial prompt (context for the first window)");
  transcribe_cmd->add_flag("--vad", transcribe.vad, "skip silence with the Silero VAD");
  transcribe_cmd->add_option("--device", transcribe.device, "cpu or cuda:N");
  transcribe_cmd
      ->add_option("--dtype", transcribe.dtype, "compute dtype: auto (f32 on cpu, f16 on cuda), f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  transcribe_cmd->add_option("--format", transcribe.format, "output format")
      ->check(CLI::IsMember({"json", "text", "srt", "vtt", "verbose_json"}));
  transcribe_cmd
      ->add_option("--cross-kv", transcribe.cross_kv,
                   "cuda: cross-attention K/V storage (fp8_e4m3 / int8 halve their memory)")
      ->check(CLI::IsMember({"same", "fp8_e4m3", "int8"}));
  transcribe_cmd->add_option("--threads", transcribe.threads, "CPU threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);

  SegmentArgs segment;
  CLI::App* segment_cmd =
      app.add_subcommand("segment", "Masks for a point/box prompt on an image with a SAM model (COCO RLE JSON)");
  segment_cmd->add_option("--model", segment.model_dir, "HF SAM model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  segment_cmd->add_option("--image", segment.image, "image file (JPEG, PNG, WebP)")->required();
  segment_cmd->add_option("--point", segment.points,
                          "X,Y,LABEL in the image's pixels (LABEL 1 foreground, 0 background); repeatable");
  segment_cmd->add_option("--box", segment.box, "X0,Y0,X1,Y1 in the image's pixels");
  segment_cmd->add_flag("--single-mask", segment.single_mask, "one mask (HF's multimask_output=False)");
  segment_cmd->add_option("--output", segment.output, "output format")->check(CLI::IsMember({"json"}));
  segment_cmd->add_option("--device", segment.device, "cpu or cuda:N");
  segment_cmd->add_option("--dtype", segment.dtype, "compute dtype: auto, f32, f16, bf16")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  segment_cmd->add_option("--threads", segment.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  segment_cmd->add_option("--max-pixels", segment.max_pixels, "refuse images with more pixels (decompression bombs)")
      ->check(CLI::PositiveNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are "errors" with exit code 0; every real usage error exits 2.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (*embed_cmd) return run_embed(embed);
  if (*tok_cmd) return run_tokenize(tokenize);
  if (*inspect_cmd) return run_inspect(inspect_dir);
  if (*demo_cmd) return run_demo_model(demo_dir, overwrite, demo_architecture);
  if (*l2c_cmd) return run_convert_llama2c(l2c_checkpoint, l2c_tokenizer, l2c_output);
  if (*generate_cmd) return run_generate(generate);
  if (*chat_cmd) return run_chat_template(chat);
  if (*quantize_cmd) return run_quantize(quantize);
  if (*calibrate_cmd) return run_calibrate(calibrate);
  if (*serve_cmd) return run_serve(serve);
  if (*bench_cmd) return run_bench(bench);
  if (*transcribe_cmd) return run_transcribe(transcribe);
  if (*segment_cmd) {
    if (segment.points.empty() && segment.box.empty()) {
      std::fprintf(stderr, "mmserve segment: give at least one --point or a --box\n");
      return 2;
    }
    return run_segment(segment);
  }
  return 2;
}
