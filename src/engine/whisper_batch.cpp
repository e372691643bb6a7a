// WhisperExecutor as an engine::Executor (see whisper_executor.h): creation from the server's family config, the
// warm-up, and run(): one dynamic batch of transcription requests. The items without a segment callback are
// decoded together by transcribe_batch (their windows share the encoder and the decoder steps, with decoder
// rows admitted inside the executor); a request with a callback (a streaming response) is decoded alone by
// transcribe() so its segments reach the client as they finish.
// Tests: tests/unit/serving/whisper_serving_test.cpp (batched transcripts equal single-request ones, streaming
// callbacks, cancellation), tests/unit/engine/whisper_executor_test.cpp.
#include <chrono>

#include "engine/families.h"
#include "engine/whisper_executor.h"

namespace mmserve::engine {

StatusOr<std::unique_ptr<Executor>> WhisperExecutor::create_for_server(const std::string& model_dir,
                                                                       const ExecutorOptions& options,
                                                                       const nlohmann::json& family_config) {
  RETURN_IF_ERROR(check_known_keys(family_config, {"cross_kv", "decoder_rows"}, "Whisper"));
  WhisperOptions whisper;
  if (family_config.is_object()) {
    whisper.cross_kv = family_config.value("cross_kv", whisper.cross_kv);
    whisper.decoder_rows = family_config.value("decoder_rows", whisper.decoder_rows);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WhisperExecutor> executor, create(model_dir, options, whisper));
  return std::unique_ptr<Executor>(std::move(executor));
}

Status WhisperExecutor::warm() {
  TranscribeOptions warm;
  warm.language = languages().empty() ? "" : "en";
  warm.timestamps = false;
  warm.temperatures = {0.0f};
  warm.max_new_tokens = 4;
  const std::vector<float> silence(static_cast<size_t>(sample_rate()), 0.0f);
  auto warmed = transcribe(silence, warm);
  if (!warmed.ok()) return warmed.status().with_context("warm-up transcription");
  return ok_status();
}

BatchStats WhisperExecutor::run(const std::vector<BatchItem>& batch, const BatchHooks& hooks) {
  BatchStats stats;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  auto output = [](StatusOr<Transcript> t, int64_t batch_size) -> StatusOr<std::shared_ptr<const ModelOutput>> {
    if (!t.ok()) return t.status();
    auto out = std::make_shared<TranscriptOutput>();
    out->transcript = std::move(*t);
    out->batch_size = batch_size;
    return std::shared_ptr<const ModelOutput>(std::move(out));
  };
  std::vector<const WhisperInput*> inputs(batch.size());
  std::vector<size_t> together, alone;  // without / with a segment callback
  for (size_t i = 0; i < batch.size(); ++i) {
    inputs[i] = dynamic_cast<const WhisperInput*>(batch[i].input);
    if (inputs[i] == nullptr) {
      hooks.finish(i, internal_error("a Whisper executor was given another family's input"), 0);
      continue;
    }
    (inputs[i]->on_segment ? alone : together).push_back(i);
  }
  stats.slot_items[0] = static_cast<int64_t>(together.size() + alone.size());
  std::vector<StatusOr<std::shared_ptr<const ModelOutput>>> results;
  if (together.size() == 1) {
    results.push_back(output(transcribe(inputs[together[0]]->audio, inputs[together[0]]->options), 1));
  } else if (together.size() > 1) {
    std::vector<const std::vector<float>*> audios;
    std::vector<TranscribeOptions> options;
    for (size_t i : together) {
      audios.push_back(&inputs[i]->audio);
      options.push_back(inputs[i]->options);
    }
    std::vector<StatusOr<Transcript>> transcripts = transcribe_batch(audios, options);
    const int64_t size = static_cast<int64_t>(together.size());
    for (size_t k = 0; k < together.size(); ++k) {
      if (k >= transcripts.size()) {  // a broken executor contract is reported, never indexed past
        results.emplace_back(internal_error("transcribe_batch returned " + std::to_string(transcripts.size()) +
                                            " results for " + std::to_string(together.size()) + " requests"));
      } else {
        results.push_back(output(std::move(transcripts[k]), size));
      }
    }
  }
  // A device fault fails every request of the batch with kInternal; a kInternal on some requests only (a decoding
  // bug on one sequence) is that request's failure.
  bool all_internal = !results.empty();
  for (const auto& r : results) all_internal = all_internal && !r.ok() && r.status().code() == StatusCode::kInternal;
  if (all_internal) stats.device_fault = results[0].status();
  const double together_ms = elapsed_ms();
  for (size_t k = 0; k < together.size(); ++k) hooks.finish(together[k], std::move(results[k]), together_ms);
  for (size_t i : alone) {
    const auto own_start = std::chrono::steady_clock::now();
    auto result = output(transcribe(inputs[i]->audio, inputs[i]->options, inputs[i]->on_segment), 1);
    hooks.finish(i, std::move(result),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - own_start).count());
  }
  if (!hooks.keep_inputs) {
    for (const BatchItem& item : batch) {
      if (auto* input = dynamic_cast<WhisperInput*>(item.mutable_input)) std::vector<float>().swap(input->audio);
    }
  }
  stats.compute_ms = elapsed_ms();
  return stats;
}

}  // namespace mmserve::engine
