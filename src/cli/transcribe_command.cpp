// `mmserve transcribe`: decodes an audio file (WAV, FLAC, Ogg, MP3; any rate and channel count, converted to
// 16 kHz mono), runs a WhisperExecutor on it and prints the transcript in one of OpenAI's response formats.
// Errors (a missing or non-audio file, a broken model directory, bad options) print "mmserve: error: ..." and
// exit 1. Tests: tests/e2e/cli_test.cpp (Transcribe*).
#include <cstdio>

#include "cli/commands.h"
#include "engine/whisper_executor.h"
#include "frontends/audio/audio.h"

namespace mmserve::cli {

int run_transcribe(const TranscribeArgs& args) {
  auto format = engine::parse_transcript_format(args.format);
  if (!format.ok()) return fail(format.status().message());
  auto device = parse_device(args.device);
  if (!device.ok()) return fail(device.status().message());
  engine::ExecutorOptions options;
  options.device = *device;
  options.threads = args.threads;
  options.whisper_cross_kv = args.cross_kv;

  engine::TranscribeOptions transcribe;
  transcribe.language = args.language;
  transcribe.task = args.task == "translate" ? engine::WhisperTask::kTranslate : engine::WhisperTask::kTranscribe;
  transcribe.timestamps = !args.no_timestamps;
  transcribe.beam_size = args.beam;
  transcribe.max_new_tokens = args.max_new_tokens;
  if (args.temperature >= 0) transcribe.temperatures = {static_cast<float>(args.temperature)};
  transcribe.initial_prompt = args.prompt;
  transcribe.vad = args.vad;

  // The audio first: a wrong file fails before the model loads.
  audio::AudioDecodeOptions decode;
  decode.max_seconds = 2.0 * 3600;  // issue 5: longer inputs are refused
  auto audio = audio::decode_audio_file(args.file, decode);
  if (!audio.ok()) return fail(audio.status().message());

  auto executor = engine::WhisperExecutor::create(args.model_dir, options);
  if (!executor.ok()) return fail(executor.status().message());
  decode.sample_rate = (*executor)->sample_rate();
  if (audio->sample_rate != decode.sample_rate) {
    audio = audio::decode_audio_file(args.file, decode);
    if (!audio.ok()) return fail(audio.status().message());
  }
  auto transcript = (*executor)->transcribe(audio->samples, transcribe);
  if (!transcript.ok()) return fail(transcript.status().message());
  const std::string out = engine::format_transcript(*transcript, *format, transcribe.task);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (*format == engine::TranscriptFormat::kJson || *format == engine::TranscriptFormat::kVerboseJson) {
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace mmserve::cli
