// `mmserve transcribe`: decodes an audio file (WAV, FLAC, Ogg, MP3; any rate and channel count, converted to
// 16 kHz mono) with the Whisper family's input preparation (the server's), runs a WhisperExecutor on it and prints the
// transcript in one of OpenAI's response formats. Errors (a missing or non-audio file, a broken model directory, bad
// options) print "mmserve: error: ..." and exit 1. Tests: tests/e2e/cli_test.cpp (Transcribe*).
#include <cstdio>

#include "cli/commands.h"
#include "cli/local_run.h"
#include "engine/whisper_executor.h"
#include "engine/whisper_inputs.h"

namespace mmserve::cli {

int run_transcribe(const TranscribeArgs& args) {
  auto format = engine::parse_transcript_format(args.format);
  if (!format.ok()) return fail(format.status().message());
  auto options = executor_options(args.device, args.dtype, args.threads, 64);
  if (!options.ok()) return fail(options.status().message());
  engine::WhisperOptions whisper;
  whisper.cross_kv = args.cross_kv;

  engine::WhisperParams params;
  engine::TranscribeOptions& transcribe = params.options;
  transcribe.language = args.language;
  transcribe.task = args.task == "translate" ? engine::WhisperTask::kTranslate : engine::WhisperTask::kTranscribe;
  transcribe.timestamps = !args.no_timestamps;
  transcribe.beam_size = args.beam;
  transcribe.max_new_tokens = args.max_new_tokens;
  if (args.temperature >= 0) transcribe.temperatures = {static_cast<float>(args.temperature)};
  transcribe.initial_prompt = args.prompt;
  transcribe.vad = args.vad;

  // The file first: a missing one fails before the model loads.
  auto bytes = read_input_file(args.file);
  if (!bytes.ok()) return fail(bytes.status().message());
  auto executor = engine::WhisperExecutor::create(args.model_dir, *options, whisper);
  if (!executor.ok()) return fail(executor.status().message());
  engine::PreparerOptions prepare;
  prepare.audio_seconds_max = 2.0 * 3600;  // issue 5: longer inputs are refused
  prepare.audio_bytes_max = int64_t{4} << 30;
  const engine::WhisperInputs preparer((*executor)->sample_rate(), prepare);
  std::vector<engine::InputItem> inputs(1);
  inputs[0].kind = engine::InputKind::kAudioBytes;
  inputs[0].audio_bytes = std::move(*bytes);
  auto output = run_local(**executor, preparer, std::move(inputs), &params);
  if (!output.ok()) {
    const bool input_error = output.status().message().rfind("audio", 0) == 0;
    return fail(input_error ? args.file + ": " + output.status().message() : output.status().message());
  }
  const auto* transcript = engine::output_as<engine::TranscriptOutput>(*output);
  if (transcript == nullptr) return fail("internal error: the Whisper executor returned no transcript");
  const std::string out = engine::format_transcript(transcript->transcript, *format, transcribe.task);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (*format == engine::TranscriptFormat::kJson || *format == engine::TranscriptFormat::kVerboseJson) {
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace mmserve::cli
