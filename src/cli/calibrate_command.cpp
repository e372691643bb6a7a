// `mmserve calibrate` (issue 17 item 4): static FP8 scales from --data's prompts, the KL check on the held-apart ones,
// and the compressed-tensors FP8 checkpoint written only when the KL is at most --max-kl (models/quant/fp8_calibrate.h
// does the work). --data is a JSONL file of {"text": ...} lines tokenised as `quantize --method awq` does. Progress
// lines go to stderr; stdout gets {"output", "kl", "max_kl", "top1_agreement", "positions", "calibration_prompts",
// "held_out_prompts", "written"} in both outcomes; a KL above --max-kl exits 1 with the figure ("mmserve: error: ...")
// and writes nothing. Other errors exit 1 with the reason, usage errors 2 (CLI11).
// Tests: tests/unit/models/quant_calibrate_test.cpp.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "models/quant/fp8_calibrate.h"

namespace mmserve::cli {

int run_calibrate(const CalibrateArgs& args) {
  models::CalibrateOptions options;
  options.model_dir = args.model_dir;
  options.output_dir = args.output_dir;
  options.max_kl = args.max_kl;
  options.holdout = args.holdout;
  if (args.activation_scheme == "static") {
    options.inputs = models::Fp8InputScale::kStatic;
  } else if (args.activation_scheme == "dynamic") {
    options.inputs = models::Fp8InputScale::kDynamicToken;
  } else {
    return fail("--activation-scheme '" + args.activation_scheme + "': expected static or dynamic");
  }
  if (args.weight_strategy == "tensor") {
    options.weights = models::Fp8WeightScale::kTensor;
  } else if (args.weight_strategy == "channel") {
    options.weights = models::Fp8WeightScale::kChannel;
  } else {
    return fail("--weight-strategy '" + args.weight_strategy + "': expected tensor or channel");
  }
  options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  StatusOr<std::vector<std::vector<int32_t>>> prompts = read_calibration_prompts(args.data, args.model_dir);
  if (!prompts.ok()) return fail(prompts.status().message());
  options.prompts = std::move(prompts).value();
  StatusOr<models::CalibrateResult> r = models::calibrate_fp8(options);
  if (!r.ok()) return fail(r.status().message());
  const nlohmann::json out = {{"output", args.output_dir},
                              {"kl", r->kl},
                              {"max_kl", args.max_kl},
                              {"top1_agreement", r->top1_agreement},
                              {"positions", r->positions},
                              {"calibration_prompts", r->calibration_prompts},
                              {"held_out_prompts", r->held_out_prompts},
                              {"written", r->written}};
  std::printf("%s\n", out.dump().c_str());
  if (!r->written) {
    char figure[160];
    std::snprintf(figure, sizeof figure,
                  "KL(p_orig || p_fp8) = %.6g over %lld held-apart positions exceeds --max-kl %g", r->kl,
                  static_cast<long long>(r->positions), args.max_kl);
    return fail(std::string(figure) + "; nothing written");
  }
  return 0;
}

}  // namespace mmserve::cli
