// End-to-end tests of the `mmserve` binary as a user runs it: real processes, real files, JSON parsed from
// stdout, exit codes and stderr messages checked. Covers embed (against HF's goldens), tokenize, inspect,
// demo-model, transcribe (Whisper: HF's tokens, every output format), convert-llama2c / generate / chat-template (the
// Llama family: run.c's story, HF's chat templates), and the bad-input paths: each must print a clear
// error and exit non-zero, never crash.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "../conformance/golden.h"

namespace mmserve {
namespace {

namespace fs = std::filesystem;
using testing::fixture;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Result run(const std::vector<std::string>& args) {
  const fs::path err_file = fs::temp_directory_path() / ("mmserve_cli_err_" + std::to_string(::getpid()));
  // The GPU host runs the carried binary (scripts/gpu-check.sh sets MMSERVE_TEST_BINARY).
  const char* carried = std::getenv("MMSERVE_TEST_BINARY");
  std::string cmd = quote(carried != nullptr && *carried != '\0' ? carried : MMSERVE_BINARY);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " 2>" + quote(err_file.string());
  Result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(err_file);
  return r;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mmserve_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void expect_user_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("mmserve: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err << "\nexpected to mention: " << needle;
}

TEST(Cli, EmbedMatchesHfGoldens) {
  const std::string model = fixture("clip-tiny-quickgelu-f32");
  Result r = run({"embed", "--model", model, "--image", fixture("images/rocket.jpg"), "--image",
                  fixture("images/chelsea.png"), "--text", "a photo of a cat", "--text", "", "--output", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = nlohmann::json::parse(r.out);
  testing::Golden golden(model + "/golden.safetensors");
  const std::vector<float> image_ref = golden.f32("image_embeds"), text_ref = golden.f32("text_embeds");
  const size_t dim = 10;  // projection_dim of this fixture
  ASSERT_EQ(out["image_embeds"].size(), 2u);
  ASSERT_EQ(out["text_embeds"].size(), 2u);
  ASSERT_EQ(out["logits_per_image"].size(), 2u);
  ASSERT_EQ(out["logits_per_image"][0].size(), 2u);
  // golden.json lists rocket.jpg, chelsea.png first among images and "a photo of a cat", "" first among texts.
  for (size_t row = 0; row < 2; ++row) {
    std::vector<float> img = out["image_embeds"][row].get<std::vector<float>>();
    std::vector<float> txt = out["text_embeds"][row].get<std::vector<float>>();
    ASSERT_EQ(img.size(), dim);
    EXPECT_LE(testing::relative_error(img.data(), image_ref.data() + row * dim, dim), 1e-4) << "image " << row;
    EXPECT_LE(testing::relative_error(txt.data(), text_ref.data() + row * dim, dim), 1e-4) << "text " << row;
  }
}

// `mmserve embed --adapter`: PEFT's adapter on both towers (tests/fixtures/lora/clip-both-r8-rslora) gives PEFT's
// embeddings of the golden's first image and text (decoded and preprocessed here, as the base test above); a decoder's
// adapter is refused naming what CLIP adapts, with a non-zero exit.
TEST(Cli, EmbedWithAnAdapterGivesPeftsEmbeddings) {
  const std::string model = fixture("clip-tiny-quickgelu-f32"), adapter = fixture("lora/clip-both-r8-rslora");
  Result r = run({"embed", "--model", model, "--adapter", adapter, "--image", fixture("images/rocket.jpg"), "--text",
                  "a photo of a cat", "--output", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = nlohmann::json::parse(r.out);
  testing::Golden golden(adapter + "/golden.safetensors");
  const size_t dim = 10;
  const std::vector<float> img = out["image_embeds"][0].get<std::vector<float>>();
  const std::vector<float> txt = out["text_embeds"][0].get<std::vector<float>>();
  ASSERT_EQ(img.size(), dim);
  ASSERT_EQ(txt.size(), dim);
  EXPECT_LE(testing::relative_error(img.data(), golden.f32("image_embeds").data(), dim), 1e-4);
  EXPECT_LE(testing::relative_error(txt.data(), golden.f32("text_embeds").data(), dim), 1e-4);
  testing::Golden base(model + "/golden.safetensors");  // the adapter moves both (else this proves nothing)
  EXPECT_GT(testing::relative_error(img.data(), base.f32("image_embeds").data(), dim), 1e-2);
  expect_user_error(run({"embed", "--model", model, "--adapter", fixture("lora/llama-qv-r4"), "--text", "x"}),
                    "visual_projection");
}

TEST(Cli, TokenizeGivesHfIds) {
  Result r =
      run({"tokenize", "--model", fixture("clip-tiny-quickgelu-f32"), "--text", "a photo of a cat", "--text", ""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["input_ids"][0].get<std::vector<int>>(), (std::vector<int>{49406, 320, 1125, 539, 320, 2368, 49407}));
  EXPECT_EQ(out["input_ids"][1].get<std::vector<int>>(), (std::vector<int>{49406, 49407}));
  Result plain = run({"tokenize", "--model", fixture("clip-tiny-quickgelu-f32"), "--no-special", "--text",
                      "a photo of a cat<|endoftext|>"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out)["input_ids"][0].get<std::vector<int>>(),
            (std::vector<int>{320, 1125, 539, 320, 2368, 49407}));
}

// `mmserve tokenize` on a Whisper model directory (HF's tokenizer files, written by
// tools/reference/make_whisper_fixtures.py) against tiktoken's ids from tools/reference/make_whisper_tokens.py:
// HF's default is [<|startoftranscript|>, <|notimestamps|>, text ids..., <|endoftext|>]. Skipped until the GPU
// host has generated the fixtures.
TEST(Cli, TokenizeWhisperGivesTiktokenIds) {
  const std::string model = fixture("whisper/whisper-tiny-mel80-f32");
  const std::string golden_path = fixture("whisper/whisper_tokens.json");
  if (!std::filesystem::exists(model + "/config.json") || !std::filesystem::exists(golden_path)) {
    GTEST_SKIP() << "golden not generated yet: run tools/reference/make_whisper_{tokens,fixtures}.py on the GPU host";
  }
  std::ifstream in(golden_path);
  const nlohmann::json golden = nlohmann::json::parse(in);
  int checked = 0;
  for (const nlohmann::json& entry : golden["entries"]) {
    const std::string text = entry["text"].get<std::string>();
    if (entry.value("allowed_special", false) || text.empty() || text.size() > 200 ||
        text.find("<|") != std::string::npos || text[0] == '-' || checked >= 20) {
      continue;  // plain, short, flag-safe texts: the CLI takes one argument per text
    }
    Result r = run({"tokenize", "--model", model, "--no-special", "--text", text});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["input_ids"][0].get<std::vector<int>>(),
              entry["tiktoken_multilingual"].get<std::vector<int>>())
        << text;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  Result with_special = run({"tokenize", "--model", model, "--text", "Hello world"});
  ASSERT_EQ(with_special.exit_code, 0) << with_special.err;
  const std::vector<int> ids = nlohmann::json::parse(with_special.out)["input_ids"][0].get<std::vector<int>>();
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 50258);  // <|startoftranscript|>
  EXPECT_EQ(ids.back(), 50257);   // <|endoftext|>
}

TEST(Cli, InspectReportsArchitectureAndSize) {
  Result r = run({"inspect", "--model", fixture("clip-tiny-gelu-f16-sharded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["architecture"], "CLIPModel");
  EXPECT_EQ(out["shards"], 2);
  EXPECT_EQ(out["parameters"], 414985);  // HF's index.json metadata says total_parameters 414985
  EXPECT_EQ(out["bytes_on_disk"], 829970);
  EXPECT_EQ(out["parameters_by_dtype"]["f16"], 414985);
  EXPECT_TRUE(out["supported"].get<bool>());
}

TEST(Cli, DemoModelWritesALoadableClip) {
  fs::path dir = temp_dir("demo") / "model";
  Result w = run({"demo-model", "--output", dir.string()});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  Result again = run({"demo-model", "--output", dir.string()});
  expect_user_error(again, "not empty");
  Result e = run({"embed", "--model", dir.string(), "--image", fixture("images/camera.png"), "--text", "a cat"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  nlohmann::json out = nlohmann::json::parse(e.out);
  std::vector<float> v = out["image_embeds"][0].get<std::vector<float>>();
  ASSERT_EQ(v.size(), 128u);
  double norm = 0;
  for (float x : v) norm += x * x;
  EXPECT_NEAR(norm, 1.0, 1e-5);
  fs::remove_all(dir.parent_path());
}

TEST(Cli, BadInputsGiveClearErrors) {
  const fs::path base = temp_dir("bad");
  const std::string good = fixture("clip-tiny-quickgelu-f32");
  auto copy_model = [&](const std::string& name) {
    fs::path d = base / name;
    fs::create_directories(d);
    for (const auto& entry : fs::directory_iterator(good)) fs::copy_file(entry.path(), d / entry.path().filename());
    return d;
  };

  expect_user_error(run({"embed", "--model", good}), "nothing to embed");
  expect_user_error(run({"embed", "--model", good, "--image", (base / "missing.png").string()}), "missing.png");
  expect_user_error(run({"embed", "--model", good, "--image", fixture("images/truncated.jpg")}), "JPEG");
  expect_user_error(run({"embed", "--model", good, "--image", fixture("images/rocket.jpg"), "--max-pixels", "1000"}),
                    "pixels");
  {
    std::ofstream(base / "garbage.png") << "this is not an image";
    expect_user_error(run({"embed", "--model", good, "--image", (base / "garbage.png").string()}), "format");
  }
  {
    fs::path d = copy_model("bad_config");
    std::ofstream(d / "config.json") << "{\"architectures\": [\"CLIPModel\"], \"text_config\": {";
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "config.json");
  }
  {
    fs::path d = copy_model("wrong_type");
    std::ofstream(d / "config.json") << R"({"architectures": ["CLIPModel"], "text_config": {"hidden_size": "big"}})";
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "hidden_size");
  }
  {
    fs::path d = copy_model("unsupported_arch");
    std::ofstream(d / "config.json") << R"({"architectures": ["BertModel"]})";
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "BertModel");
  }
  {
    fs::path d = copy_model("truncated_weights");
    fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2);
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "model.safetensors");
  }
  {
    fs::path d = copy_model("no_weights");
    fs::remove(d / "model.safetensors");
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "model.safetensors");
  }
  {
    fs::path d = copy_model("shape_mismatch");
    std::ifstream in(good + "/config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["projection_dim"] = 11;
    std::ofstream(d / "config.json") << config.dump();
    expect_user_error(run({"embed", "--model", d.string(), "--text", "x"}), "mis-shaped");
  }
  {
    fs::path d = copy_model("no_tokenizer");
    fs::remove(d / "tokenizer.json");
    expect_user_error(run({"tokenize", "--model", d.string(), "--text", "x"}), "tokenizer");
  }
  Result usage = run({"embed"});
  EXPECT_EQ(usage.exit_code, 2) << "CLI11 usage errors exit 2";
  fs::remove_all(base);
}

// ---- transcribe (Whisper) ----

// The golden's settings (tests/fixtures/whisper/*/golden.json: generate greedy, 32 new tokens, English).
std::vector<std::string> transcribe_args(const std::string& format, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"transcribe",
                                   "--model",
                                   fixture("whisper/whisper-tiny-mel80-f32"),
                                   fixture("audio/jfk.wav"),
                                   "--language",
                                   "en",
                                   "--max-new-tokens",
                                   "32",
                                   "--temperature",
                                   "0",
                                   "--format",
                                   format};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(Cli, TranscribeVerboseJsonHasOpenAiShapeAndHfTokens) {
  Result r = run(transcribe_args("verbose_json", {"--no-timestamps"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["task"], "transcribe");
  EXPECT_EQ(out["language"], "english");
  EXPECT_NEAR(out["duration"].get<double>(), 11.0, 0.01);
  ASSERT_EQ(out["segments"].size(), 1u);
  for (const char* key : {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                          "compression_ratio", "no_speech_prob"}) {
    EXPECT_TRUE(out["segments"][0].contains(key)) << key;
  }
  // The random model's tokens are HF's greedy ones (generate() with the generation config's suppression).
  std::ifstream in(fixture("whisper/whisper-tiny-mel80-f32/golden.json"));
  const nlohmann::json golden = nlohmann::json::parse(in);
  EXPECT_EQ(out["segments"][0]["tokens"], golden["generate"]["greedy"]["tokens"]);
  EXPECT_EQ(out["text"], out["segments"][0]["text"]);
}

TEST(Cli, TranscribeEveryFormatParses) {
  Result json = run(transcribe_args("json"));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  ASSERT_TRUE(j.contains("text"));
  EXPECT_EQ(j.size(), 1u);

  Result text = run(transcribe_args("text"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, j["text"].get<std::string>() + "\n");

  Result verbose = run(transcribe_args("verbose_json"));
  ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
  const nlohmann::json v = nlohmann::json::parse(verbose.out);
  const size_t segments = v["segments"].size();
  ASSERT_GT(segments, 0u);

  // SRT: blocks "N\nHH:MM:SS,mmm --> HH:MM:SS,mmm\ntext\n\n", numbered from 1, one per segment.
  Result srt = run(transcribe_args("srt"));
  ASSERT_EQ(srt.exit_code, 0) << srt.err;
  const std::regex srt_block(R"((\d+)\n(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)\n[^\n]*\n\n)");
  size_t blocks = 0;
  std::string rest = srt.out;
  std::smatch m;
  while (std::regex_search(rest, m, srt_block, std::regex_constants::match_continuous)) {
    EXPECT_EQ(std::stoul(m[1].str()), ++blocks);
    rest = m.suffix().str();
  }
  EXPECT_TRUE(rest.empty()) << "unparsed SRT: " << rest;
  EXPECT_EQ(blocks, segments);

  // WebVTT: the header, then blocks "HH:MM:SS.mmm --> HH:MM:SS.mmm\ntext\n\n".
  Result vtt = run(transcribe_args("vtt"));
  ASSERT_EQ(vtt.exit_code, 0) << vtt.err;
  ASSERT_EQ(vtt.out.rfind("WEBVTT\n\n", 0), 0u) << vtt.out;
  const std::regex vtt_block(R"((\d\d:\d\d:\d\d\.\d\d\d) --> (\d\d:\d\d:\d\d\.\d\d\d)\n[^\n]*\n\n)");
  rest = vtt.out.substr(8);
  blocks = 0;
  while (std::regex_search(rest, m, vtt_block, std::regex_constants::match_continuous)) {
    ++blocks;
    rest = m.suffix().str();
  }
  EXPECT_TRUE(rest.empty()) << "unparsed VTT: " << rest;
  EXPECT_EQ(blocks, segments);
}

TEST(Cli, TranscribeBadInputsGiveClearErrors) {
  const fs::path base = temp_dir("transcribe_bad");
  const std::string model = fixture("whisper/whisper-tiny-mel80-f32");
  expect_user_error(run({"transcribe", "--model", model, (base / "missing.wav").string()}), "missing.wav");
  {
    std::ofstream(base / "notes.wav") << "this is not audio at all, just text";
    expect_user_error(run({"transcribe", "--model", model, (base / "notes.wav").string()}), "notes.wav");
  }
  {
    // A WAV cut in the middle of its header.
    std::ifstream in(fixture("audio/jfk.wav"), std::ios::binary);
    std::string bytes(20, '\0');
    in.read(bytes.data(), 20);
    std::ofstream(base / "cut.wav", std::ios::binary) << bytes;
    expect_user_error(run({"transcribe", "--model", model, (base / "cut.wav").string()}), "cut.wav");
  }
  expect_user_error(run({"transcribe", "--model", model, fixture("audio/jfk.wav"), "--language", "klingon"}),
                    "klingon");
  expect_user_error(run({"transcribe", "--model", model, fixture("audio/jfk.wav"), "--device", "tpu"}), "tpu");
  EXPECT_EQ(run(transcribe_args("xml")).exit_code, 2) << "an unknown --format is a usage error";
  EXPECT_EQ(run(transcribe_args("json", {"--beam", "0"})).exit_code, 2);
  EXPECT_EQ(run(transcribe_args("json", {"--task", "summarise"})).exit_code, 2);
  EXPECT_EQ(run({"transcribe", "--model", model}).exit_code, 2) << "no file";
  fs::remove_all(base);
}

}  // namespace
// ---- The Llama family: convert-llama2c, generate, tokenize, chat-template (issue 14).
namespace {

fs::path converted_stories() {
  const fs::path dir = temp_dir("stories");
  const Result r = run({"convert-llama2c", "--checkpoint", fixture("../../assets/llama2c/stories260K.bin"), "--tokenizer",
                        fixture("../../assets/llama2c/tok512.bin"), "--output", dir.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string trim_newlines(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Greedy from BOS: the text is HF's decode (skip_special_tokens) of 256 ids and equals llama2.c run.c's output.
TEST(Cli, GenerateGreedyFromBosIsRunCsStory) {
  const fs::path dir = converted_stories();
  const Result r = run({"generate", "--model", dir.string(), "--prompt-ids", "1", "--temperature", "0",
                        "--max-new-tokens", "256", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], nlohmann::json::array({1}));
  EXPECT_EQ(out["ids"].size(), 256u);
  EXPECT_EQ(out["finish_reason"], "length");
  EXPECT_EQ(trim_newlines(out["text"].get<std::string>()),
            trim_newlines(read_text(fixture("llama2c/stories260K_golden_t0.txt"))));
  fs::remove_all(dir);
}

TEST(Cli, GenerateTokenizesStopsAndSeeds) {
  const fs::path dir = converted_stories();
  const Result tok = run({"tokenize", "--model", dir.string(), "--text", "Once upon a time"});
  ASSERT_EQ(tok.exit_code, 0) << tok.err;
  const nlohmann::json ids = nlohmann::json::parse(tok.out)["input_ids"][0];
  EXPECT_EQ(ids[0], 1);  // BOS from the converted tokenizer's post-processor
  const Result g = run({"generate", "--model", dir.string(), "--prompt", "Once upon a time", "--temperature", "0",
                        "--max-new-tokens", "40", "--stop", "Lily"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const nlohmann::json out = nlohmann::json::parse(g.out);
  EXPECT_EQ(out["prompt_ids"], ids);  // --prompt is tokenised as HF's tokenizer(text)
  EXPECT_EQ(out["finish_reason"], "stop");
  const std::string text = out["text"];
  EXPECT_EQ(text.find("Lily"), std::string::npos) << text;  // the stop string is not included
  EXPECT_FALSE(text.empty());
  EXPECT_LT(out["ids"].size(), 40u);
  // Sampling: the same seed gives the same text; --output text prints the text alone.
  std::vector<std::string> sampled;
  for (int i = 0; i < 2; ++i) {
    const Result s = run({"generate", "--model", dir.string(), "--prompt", "Once upon a time", "--temperature", "1.5",
                          "--top-k", "20", "--seed", "11", "--max-new-tokens", "30", "--output", "text"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    sampled.push_back(s.out);
  }
  EXPECT_EQ(sampled[0], sampled[1]);
  fs::remove_all(dir);
}

TEST(Cli, GenerateRefusesBadArguments) {
  const fs::path dir = converted_stories();
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "a", "--prompt-ids", "1"}), "exactly one");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "a", "--temperature", "-1"}), "temperature");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "a", "--top-p", "0"}), "top_p");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt-ids", "1,x"}), "not a token id");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt-ids", "1,600"}), "outside the vocabulary");
  // The CPU path computes in f32; on a machine without a GPU, cuda:0 says why it cannot run.
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "a", "--dtype", "bf16"}), "f32");
  const Result gpu = run({"generate", "--model", dir.string(), "--prompt", "a", "--device", "cuda:0"});
  if (gpu.exit_code != 0) expect_user_error(gpu, "CUDA");
  expect_user_error(run({"generate", "--model", fixture("clip-tiny-quickgelu-f32"), "--prompt", "a"}),
                    "needs a decoder");
  const fs::path messages = dir / "bad.json";
  std::ofstream(messages) << "{not json";
  expect_user_error(run({"generate", "--model", dir.string(), "--messages", messages.string()}), "not valid JSON");
  fs::remove_all(dir);
}

// chat-template renders what HF's apply_chat_template rendered (tests/fixtures/chat_templates/goldens.json, made
// with transformers 5.17 on the GPU host): Qwen2's template on a multi-turn conversation, with and without the
// generation prompt; a template that raises gives its message.
TEST(Cli, ChatTemplateEqualsHf) {
  const nlohmann::json goldens = nlohmann::json::parse(read_text(fixture("chat_templates/goldens.json")))["goldens"];
  const nlohmann::json cases = nlohmann::json::parse(read_text(fixture("chat_templates/cases.json")));
  const fs::path dir = temp_dir("chat");
  fs::copy_file(fixture("chat_templates/templates/qwen2.jinja"), dir / "chat_template.jinja");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  std::ofstream(dir / "messages.json") << cases["multi_turn"].dump();
  int checked = 0;
  for (const nlohmann::json& g : goldens) {
    if (g["template"] != "qwen2" || g["case"] != "multi_turn" || !g["kwargs"].empty()) continue;
    std::vector<std::string> args = {"chat-template", "--model", dir.string(), "--messages",
                                     (dir / "messages.json").string()};
    if (!g["add_generation_prompt"].get<bool>()) args.push_back("--no-generation-prompt");
    const Result r = run(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["prompt"], g["output"]);
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  fs::remove(dir / "chat_template.jinja");
  std::ofstream(dir / "chat_template.jinja") << "{{ raise_exception('roles must alternate') }}";
  expect_user_error(run({"chat-template", "--model", dir.string(), "--messages", (dir / "messages.json").string()}),
                    "roles must alternate");
  fs::remove_all(dir);
}


// A tiny LLaVA fixture (tests/fixtures/llava, HF's goldens) made servable: its weights and preprocessor_config.json,
// plus tests/fixtures/llava_servable's byte-level tokenizer.json of the model's 256 ids ("<image>" = 255) and
// LLaVA-1.5-style chat template. The ids are what the tests compare (with HF's); the tokenizer only has to exist
// and know "<image>".
fs::path servable_llava(const std::string& variant) {
  const fs::path d = temp_dir("llava_" + variant);
  for (const char* f : {"config.json", "model.safetensors", "preprocessor_config.json"}) {
    fs::copy_file(fixture("llava/" + variant + "/" + f), d / f);
  }
  for (const char* f : {"tokenizer.json", "chat_template.jinja"}) {
    fs::copy_file(fixture(std::string("llava_servable/") + f), d / f);
  }
  return d;
}

std::string join_ids(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t id : ids) {
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(id));
  }
  return out;
}

constexpr const char* kLlavaVariants[] = {"llava-llama-f32", "llava-llama-list-full-bf16-hubnames",
                                          "llava-mixtral-f32-v5names", "llava-next-llama-f32",
                                          "llava-next-mixtral-list-bf16-hubnames"};

// `mmserve generate --image` (plus `device_args`) on one LLaVA fixture, given the prompt with one placeholder id per
// image (expanded as HF's processor does) or already expanded: the expanded prompt and HF's greedy ids.
void expect_llava_greedy(const std::string& variant, const std::vector<std::string>& device_args) {
  SCOPED_TRACE(variant);
  const fs::path dir = servable_llava(variant);
  const nlohmann::json meta = nlohmann::json::parse(read_text(fixture("llava/" + variant + "/golden.json")));
  const std::vector<int64_t> expanded = meta["prompt_ids"].get<std::vector<int64_t>>();
  const std::vector<int64_t> greedy = meta["greedy_ids"].get<std::vector<int64_t>>();
  std::vector<int64_t> collapsed;  // one 255 per image
  for (size_t i = 0; i < expanded.size(); ++i) {
    if (expanded[i] != 255 || i == 0 || expanded[i - 1] != 255) collapsed.push_back(expanded[i]);
  }
  for (const std::vector<int64_t>* ids : {static_cast<const std::vector<int64_t>*>(&collapsed), &expanded}) {
    std::vector<std::string> args = {"generate", "--model", dir.string(), "--prompt-ids", join_ids(*ids),
                                     "--temperature", "0", "--max-new-tokens", std::to_string(greedy.size()),
                                     "--ignore-eos"};
    args.insert(args.end(), device_args.begin(), device_args.end());
    for (const auto& image : meta["images"]) {
      args.push_back("--image");
      args.push_back(fixture("images/" + image.get<std::string>()));
    }
    const Result r = run(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out["prompt_ids"].get<std::vector<int64_t>>(), expanded);
    EXPECT_EQ(out["ids"].get<std::vector<int64_t>>(), greedy);
  }
  fs::remove_all(dir);
}

// `mmserve generate --image` on a LLaVA and a LLaVA-NeXT (each image tiled by its size, its own placeholder count,
// the tiles' features packed): the server's preprocessing of the real image files, the vision tower, the
// placeholders fed image features through the engine's chunked prefill, and HF's greedy ids.
TEST(Cli, GenerateWithImagesReproducesHfsLlava) {
  for (const char* variant : kLlavaVariants) expect_llava_greedy(variant, {});
}

// The same on the GPU in f32 (LlavaCudaVision + the CUDA decoder through the executor): HF's greedy ids exactly.
// Skipped, saying so, where no GPU is visible; scripts/gpu-check.sh runs it (the *Gpu* filter).
TEST(CliGpu, GenerateWithImagesOnTheGpuReproducesHfsLlava) {
  if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "GPU test skipped: no /dev/nvidia0 on this machine";
  for (const char* variant : kLlavaVariants) expect_llava_greedy(variant, {"--device", "cuda:0", "--dtype", "f32"});
}

// LoRA (issue 16): `mmserve generate --adapter` gives PEFT's greedy ids for each of PEFT's adapters over the tiny
// Llama (tests/fixtures/lora), on the CPU and (CliGpu) on cuda:0 in f32 (the adapter in a GPU slot, decode steps
// replayed from the LoRA graphs); a broken adapter is a user error naming the field.
void expect_lora_greedy(const std::vector<std::string>& device) {
  const fs::path d = temp_dir("lora_base");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture(std::string("llama/llama-gqa-f32/") + f), d / f);
  fs::copy_file(fixture("llava_servable/tokenizer.json"), d / "tokenizer.json");
  for (const char* variant : {"llama-qv-r4", "llama-all-r8-rslora", "llama-patterns-regex"}) {
    SCOPED_TRACE(variant);
    const nlohmann::json golden = nlohmann::json::parse(read_text(fixture(std::string("lora/") + variant + "/golden.json")));
    std::string ids;
    for (const auto& id : golden["prompt_ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
    std::vector<std::string> args = {"generate", "--model", d.string(), "--adapter", fixture(std::string("lora/") + variant),
                                     "--prompt-ids", ids, "--max-new-tokens", "12", "--temperature", "0", "--ignore-eos"};
    args.insert(args.end(), device.begin(), device.end());
    const Result r = run(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["ids"], golden["greedy_ids"]);
  }
  fs::remove_all(d);
}

TEST(Cli, GenerateWithAnAdapterGivesPeftsIds) {
  expect_lora_greedy({});
  const fs::path bad = temp_dir("lora_dora");
  std::ofstream(bad / "adapter_config.json") << R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "use_dora": true})";
  const fs::path d = temp_dir("lora_base2");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture(std::string("llama/llama-gqa-f32/") + f), d / f);
  fs::copy_file(fixture("llava_servable/tokenizer.json"), d / "tokenizer.json");
  expect_user_error(run({"generate", "--model", d.string(), "--adapter", bad.string(), "--prompt-ids", "1,2"}), "use_dora");
  fs::remove_all(bad), fs::remove_all(d);
}

// --adapter auto: the gate head (tests/fixtures/lora_gate) picks torch's two adapters with torch's weights, and the
// answer is PEFT's weighted combination of them (its greedy ids); --adapter auto without a gate is a user error.
// `mmserve generate --adapter auto --gate ...` (plus `device_args`): torch's pair and weights, PEFT's text for them.
void expect_gate_routing(const std::vector<std::string>& device_args) {
  const fs::path d = temp_dir("lora_gate_base");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fixture(std::string("llama/llama-gqa-f32/") + f), d / f);
  fs::copy_file(fixture("llava_servable/tokenizer.json"), d / "tokenizer.json");
  const nlohmann::json meta = nlohmann::json::parse(read_text(fixture("lora_gate/golden.json")));
  const nlohmann::json& mix = meta["mix"];
  std::string ids;
  for (const auto& id : meta["prompts"][mix["prompt"].get<size_t>()]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  std::vector<std::string> args = {"generate", "--model", d.string(), "--adapter", "auto", "--gate",
                                   fixture("lora_gate/gate.safetensors"), "--prompt-ids", ids, "--max-new-tokens", "12",
                                   "--temperature", "0", "--ignore-eos"};
  for (const auto& name : meta["adapters"]) {
    args.push_back("--adapters");
    args.push_back(fixture("lora/" + name.get<std::string>()));
  }
  args.insert(args.end(), device_args.begin(), device_args.end());
  const Result r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  EXPECT_EQ(out["ids"], mix["greedy_ids"]);
  ASSERT_EQ(out["adapters"].size(), 2u) << r.out;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out["adapters"][i]["name"], mix["adapters"][i]);
    EXPECT_NEAR(out["adapters"][i]["weight"].get<double>(), mix["weights"][i].get<double>(), 1e-5);
  }
  expect_user_error(run({"generate", "--model", d.string(), "--adapter", "auto", "--prompt-ids", ids}), "--gate");
  fs::remove_all(d);
}

TEST(Cli, GenerateWithTheGateRoutesAsTorchAndMixesAsPeft) { expect_gate_routing({}); }

// On the GPU: the router's first layer on the device (LlamaCudaModel::gate_first_layer), the pair's second pass.
TEST(CliGpu, GenerateWithTheGateOnTheGpuRoutesAsTorchAndMixesAsPeft) {
  if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "GPU test skipped: no /dev/nvidia0 on this machine";
  expect_gate_routing({"--device", "cuda:0", "--dtype", "f32"});
}

TEST(CliGpu, GenerateWithAnAdapterOnTheGpuGivesPeftsIds) {
  if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "GPU test skipped: no /dev/nvidia0 on this machine";
  expect_lora_greedy({"--device", "cuda:0", "--dtype", "f32"});
}

// An adapter on LLaVA's decoder (tools/reference/make_lora_fixtures.py llava-lm-qv-r4: PEFT over the tiny LLaVA
// fixture, its language model's q/v): `mmserve generate --image ... --adapter DIR` gives PEFT's greedy ids (the
// adapter's names under transformers 5's module tree, model.language_model.*).
void expect_llava_lora_greedy(const std::vector<std::string>& device_args,
                              const std::string& variant = "llava-lm-qv-r4") {
  const std::string adapter = fixture("lora/" + variant);
  const fs::path dir = servable_llava("llava-llama-f32");
  const nlohmann::json meta = nlohmann::json::parse(read_text(adapter + "/golden.json"));
  const nlohmann::json base = nlohmann::json::parse(read_text(fixture("llava/llava-llama-f32/golden.json")));
  const std::vector<int64_t> greedy = meta["greedy_ids"].get<std::vector<int64_t>>();
  std::vector<std::string> args = {"generate", "--model", dir.string(), "--adapter", adapter, "--prompt-ids",
                                   join_ids(meta["prompt_ids"].get<std::vector<int64_t>>()), "--temperature", "0",
                                   "--max-new-tokens", std::to_string(greedy.size()), "--ignore-eos"};
  args.insert(args.end(), device_args.begin(), device_args.end());
  for (const auto& image : base["images"]) {
    args.push_back("--image");
    args.push_back(fixture("images/" + image.get<std::string>()));
  }
  const Result r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"].get<std::vector<int64_t>>(), greedy);
  EXPECT_NE(meta["base_greedy_ids"].get<std::vector<int64_t>>(), greedy) << "the adapter must change the text";
  fs::remove_all(dir);
}

TEST(Cli, GenerateWithAnAdapterOnLlavasDecoderGivesPeftsIds) { expect_llava_lora_greedy({}); }

// An adapter on LLaVA's projector (linear_1 r 4, linear_2 r 2) and its decoder's o_proj (PEFT's llava-projector-r4):
// the image rows the placeholders take are the adapted projector's, PEFT's greedy ids exact.
TEST(Cli, GenerateWithAnAdapterOnLlavasProjectorGivesPeftsIds) { expect_llava_lora_greedy({}, "llava-projector-r4"); }

TEST(CliGpu, GenerateWithAnAdapterOnLlavasDecoderOnTheGpuGivesPeftsIds) {
  if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "GPU test skipped: no /dev/nvidia0 on this machine";
  expect_llava_lora_greedy({"--device", "cuda:0", "--dtype", "f32"});
}

// The projector's deltas on the GPU (LlavaCudaVision's pass after each projector GEMM), the o_proj's in a slot.
TEST(CliGpu, GenerateWithAnAdapterOnLlavasProjectorOnTheGpuGivesPeftsIds) {
  if (!fs::exists("/dev/nvidia0")) GTEST_SKIP() << "GPU test skipped: no /dev/nvidia0 on this machine";
  expect_llava_lora_greedy({"--device", "cuda:0", "--dtype", "f32"}, "llava-projector-r4");
}

// LLaVA-NeXT's own refusals: a processor whose pinpoints are not the model's (it would count other placeholders
// than the model packs), and a placeholder count that does not match the images.
TEST(Cli, LlavaNextRefusesMismatchedPinpointsAndPlaceholders) {
  const fs::path dir = servable_llava("llava-next-llama-f32");
  const std::string chelsea = fixture("images/chelsea.png");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "<image><image> two", "--image", chelsea}),
                    "2 image placeholder(s)");
  nlohmann::json pre = nlohmann::json::parse(read_text(dir / "preprocessor_config.json"));
  pre["image_grid_pinpoints"] = nlohmann::json::parse("[[30, 60], [60, 30]]");
  std::ofstream(dir / "preprocessor_config.json") << pre.dump();
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "<image> x", "--image", chelsea}),
                    "image_grid_pinpoints differ");
  fs::remove_all(dir);
}

// The chat form: image_url parts (a local path and a data URL) become {"type": "image"} for the template, whose
// "<image>" is expanded before tokenising: the same ids as --prompt with --image files; and the refusals.
TEST(Cli, GenerateWithImageMessagesAndItsErrors) {
  const fs::path dir = servable_llava("llava-llama-f32");
  const std::string chelsea = fixture("images/chelsea.png");
  const fs::path messages = dir / "messages.json";
  std::ofstream(messages) << nlohmann::json::array(
      {{{"role", "user"},
        {"content", {{{"type", "image_url"}, {"image_url", {{"url", chelsea}}}}, {{"type", "text"}, {"text", "hi"}}}}}})
                                 .dump();
  const std::vector<std::string> common = {"--temperature", "0", "--max-new-tokens", "4", "--ignore-eos"};
  std::vector<std::string> chat = {"generate", "--model", dir.string(), "--messages", messages.string()};
  chat.insert(chat.end(), common.begin(), common.end());
  const Result a = run(chat);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<std::string> plain = {"generate", "--model", dir.string(), "--prompt", "USER: <image>\nhi\nASSISTANT:",
                                    "--image", chelsea};
  plain.insert(plain.end(), common.begin(), common.end());
  const Result b = run(plain);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const nlohmann::json ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["prompt_ids"], jb["prompt_ids"]);
  EXPECT_EQ(ja["ids"], jb["ids"]);
  const auto ids = ja["prompt_ids"].get<std::vector<int64_t>>();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 255), 25);  // 5 x 5 patches, CLS dropped

  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "<image><image> two", "--image", chelsea}),
                    "2 image placeholder(s)");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "none", "--image", chelsea}),
                    "0 image placeholder(s)");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt-ids", "1,255,255,7", "--image", chelsea}),
                    "image placeholder id");
  expect_user_error(run({"generate", "--model", dir.string(), "--prompt", "<image> x", "--image",
                         fixture("images/truncated.jpg")}),
                    "image");
  std::ofstream(messages) << R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])";
  expect_user_error(run({"generate", "--model", dir.string(), "--messages", messages.string()}), "URL fetches are disabled");
  fs::remove_all(dir);
}
}  // namespace

}  // namespace mmserve
