// `mmserve`: the command-line entry point. Parses arguments with CLI11 and dispatches to the subcommands in
// commands.h; no logic of its own. Tests: tests/e2e/cli_test.sh-style checks in tests/e2e/cli_test.cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/common/blas_core.h"

int main(int argc, char** argv) {
  using namespace mmserve::cli;
  mmserve::kernels::reexec_with_blas_coretype_if_needed(argv);  // before any work: OpenBLAS reads it at load
  CLI::App app{"mmserve: a multimodal inference server (CLIP today; Whisper, SAM and VLMs next)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mmserve 0.1.0");

  EmbedArgs embed;
  CLI::App* embed_cmd = app.add_subcommand("embed", "Embed images and texts with a CLIP model (normalised, as HF)");
  embed_cmd->add_option("--model", embed.model_dir, "HF CLIP model directory")->required()->check(CLI::ExistingDirectory);
  embed_cmd->add_option("--image", embed.images, "image file (JPEG, PNG, WebP); repeatable");
  embed_cmd->add_option("--text", embed.texts, "text; repeatable")->allow_extra_args(false);
  embed_cmd->add_option("--output", embed.output, "output format")->check(CLI::IsMember({"json"}));
  embed_cmd->add_option("--threads", embed.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  embed_cmd->add_option("--batch", embed.batch, "largest batch run at once")->check(CLI::PositiveNumber);
  embed_cmd->add_option("--max-pixels", embed.max_pixels, "refuse images with more pixels (decompression bombs)")
      ->check(CLI::PositiveNumber);

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
  demo_cmd->add_option("--architecture", demo_architecture, "small (the demo) or vit-b32 (for benchmarks)")
      ->check(CLI::IsMember({"small", "vit-b32"}));

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
  return 2;
}
