// `mmserve segment`: SAM's masks for one prompt on one image, with the SAM family's own input preparation and
// executor (the server's code, cli/local_run.h). All the --point flags and the --box form one prompt, as HF's
// input_points / input_labels / input_boxes for one image, in the image's pixels. Prints
// {"iou_scores": [...], "masks": [{"size": [H, W], "counts": "..."}]}: three masks in HF's multimask order unless
// --single-mask, each as COCO compressed RLE (pycocotools' string form). Errors print "mmserve: error: ..." and
// exit 1. Tests: tests/e2e/cli_test.cpp (Segment*).
#include <cstdio>
#include <sstream>

#include "api/sam_codec.h"
#include "cli/commands.h"
#include "cli/local_run.h"
#include "engine/sam_executor.h"
#include "engine/sam_inputs.h"
#include "models/registry.h"

namespace mmserve::cli {
namespace {

// "a,b,c" -> numbers (exactly `n` of them); errors name the flag.
StatusOr<std::vector<double>> numbers(const std::string& text, size_t n, const std::string& flag) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stod(part, &used));
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      return invalid_argument(flag + " '" + text + "': '" + part + "' is not a number");
    }
  }
  if (out.size() != n) {
    return invalid_argument(flag + " '" + text + "' needs " + std::to_string(n) + " comma-separated numbers");
  }
  return out;
}

}  // namespace

int run_segment(const SegmentArgs& args) {
  auto family = models::detect_family(args.model_dir);
  if (!family.ok()) return fail(family.status().message());
  if (*family != models::Family::kSam) {
    return fail(args.model_dir + ": segment needs a SAM model; this is a " + models::family_name(*family) + " model");
  }
  auto options = executor_options(args.device, args.dtype, args.threads, 1);
  if (!options.ok()) return fail(options.status().message());
  std::vector<engine::InputItem> inputs(1);
  inputs[0].kind = engine::InputKind::kImageBytes;
  auto bytes = read_input_file(args.image);
  if (!bytes.ok()) return fail(bytes.status().message());
  inputs[0].image_bytes = std::move(*bytes);
  if (!args.points.empty()) {
    engine::InputItem coords, labels;
    coords.kind = labels.kind = engine::InputKind::kTensor;
    coords.name = "point_coords";
    labels.name = "point_labels";
    for (const std::string& p : args.points) {
      auto v = numbers(p, 3, "--point");
      if (!v.ok()) return fail(v.status().message());
      coords.values.push_back(static_cast<float>((*v)[0]));
      coords.values.push_back(static_cast<float>((*v)[1]));
      labels.values.push_back(static_cast<float>((*v)[2]));
    }
    coords.shape = {static_cast<int64_t>(args.points.size()), 2};
    labels.shape = {static_cast<int64_t>(args.points.size())};
    inputs.push_back(std::move(coords));
    inputs.push_back(std::move(labels));
  }
  if (!args.box.empty()) {
    auto v = numbers(args.box, 4, "--box");
    if (!v.ok()) return fail(v.status().message());
    engine::InputItem box;
    box.kind = engine::InputKind::kTensor;
    box.name = "boxes";
    box.shape = {1, 4};
    for (double x : *v) box.values.push_back(static_cast<float>(x));
    inputs.push_back(std::move(box));
  }
  engine::SamOptions sam;
  sam.embedding_cache_bytes = 0;  // one image, one prompt: nothing to reuse
  auto executor = engine::SamExecutor::create(args.model_dir, *options, sam);
  if (!executor.ok()) return fail(executor.status().message());
  engine::PreparerOptions prepare;
  prepare.max_image_pixels = args.max_pixels;
  auto preparer = engine::SamInputs::create(args.model_dir, **executor, prepare);
  if (!preparer.ok()) return fail(preparer.status().message());
  engine::SamParams params;
  params.multimask_output = !args.single_mask;
  auto output = run_local(**executor, **preparer, std::move(inputs), &params);
  if (!output.ok()) {
    const std::string& m = output.status().message();
    return fail(m.rfind("image:", 0) == 0 ? args.image + ": " + m.substr(7) : m);
  }
  const auto* masks = engine::output_as<engine::SamOutput>(*output);
  if (masks == nullptr) return fail("internal error: the SAM executor returned no masks");
  std::string out = "{\"iou_scores\":[";
  for (size_t i = 0; i < masks->iou_scores.size(); ++i) {
    char number[32];
    std::snprintf(number, sizeof(number), "%s%.9g", i ? "," : "", masks->iou_scores[i]);
    out += number;
  }
  out += "],\"masks\":[";
  for (int64_t k = 0; k < masks->count; ++k) out += (k ? "," : "") + api::mask_rle_json(*masks, k);
  out += "]}\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace mmserve::cli
