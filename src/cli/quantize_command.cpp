// `mmserve quantize` (issue 17 item 4): a Llama-family checkpoint to a W4A16 one in AWQ's GEMM or GPTQ's format
// (models/quant/quantize.h does the work). --method awq reads --data, a JSONL file of {"text": ...} lines, each
// tokenised with the model's tokenizer as HF's tokenizer(text) (special tokens added). Progress lines go to stderr,
// one per layer; on success stdout gets {"output", "method", "format", "group_size", "calibration_prompts"}. Errors
// print "mmserve: error: ..." and exit 1.
// Tests: tests/unit/models/quant_quantize_test.cpp (the binary's errors and a quantised fixture that loads).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/local_run.h"
#include "frontends/text/hf_tokenizer.h"
#include "models/quant/quantize.h"

namespace mmserve::cli {
// The prompts of a JSONL file as token ids (commands.h); errors name the file and line.
StatusOr<std::vector<std::vector<int32_t>>> read_calibration_prompts(const std::string& path, const std::string& model_dir) {
  ASSIGN_OR_RETURN(std::string text, read_input_file(path));
  ASSIGN_OR_RETURN(std::unique_ptr<text::HfTokenizer> tokenizer, text::HfTokenizer::from_model_dir(model_dir));
  std::vector<std::vector<int32_t>> prompts;
  std::stringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return invalid_argument(where + ": expected a JSON object with a \"text\" string");
    }
    StatusOr<std::vector<int32_t>> ids = tokenizer->encode(j["text"].get<std::string>());
    if (!ids.ok()) return ids.status().with_context(where);
    prompts.push_back(std::move(ids).value());
  }
  if (prompts.empty()) return invalid_argument(path + ": no prompts");
  return prompts;
}

int run_quantize(const QuantizeArgs& args) {
  models::QuantizeOptions options;
  options.model_dir = args.model_dir;
  options.output_dir = args.output_dir;
  options.method = args.method;
  options.format = args.format;
  options.group_size = args.group_size;
  options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (!args.data.empty()) {
    if (args.method != "awq") return fail("--data is read by --method awq only");
    StatusOr<std::vector<std::vector<int32_t>>> prompts = read_calibration_prompts(args.data, args.model_dir);
    if (!prompts.ok()) return fail(prompts.status().message());
    options.calibration = std::move(prompts).value();
  }
  const Status s = models::quantize_checkpoint(options);
  if (!s.ok()) return fail(s.message());
  const nlohmann::json out = {{"output", args.output_dir},
                              {"method", args.method},
                              {"format", args.format},
                              {"group_size", args.group_size},
                              {"calibration_prompts", options.calibration.size()}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace mmserve::cli
