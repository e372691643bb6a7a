// run_whisper_batch (see whisper_batch.h). Tests: tests/unit/serving/whisper_serving_test.cpp.
#include "serving/whisper_batch.h"

namespace mmserve::serving {
namespace {

ResponseData response_for(engine::Transcript transcript, int batch_size) {
  ResponseData out;
  out.batch_size = batch_size;
  out.transcript = std::move(transcript);
  return out;
}

}  // namespace

WhisperBatchRun run_whisper_batch(engine::WhisperExecutor& executor, const std::vector<PendingRequestPtr>& batch) {
  WhisperBatchRun run;
  run.responses.resize(batch.size(), Status(StatusCode::kInternal, "not run"));
  const Clock::time_point start = Clock::now();

  std::vector<size_t> together;  // requests without a callback
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i]->on_segment) together.push_back(i);
  }
  if (together.size() == 1) {
    PendingRequest& r = *batch[together[0]];
    StatusOr<engine::Transcript> t = executor.transcribe(r.audio, r.transcribe);
    run.responses[together[0]] =
        t.ok() ? StatusOr<ResponseData>(response_for(std::move(*t), 1)) : StatusOr<ResponseData>(t.status());
  } else if (together.size() > 1) {
    std::vector<const std::vector<float>*> audios;
    std::vector<engine::TranscribeOptions> options;
    for (size_t i : together) {
      audios.push_back(&batch[i]->audio);
      options.push_back(batch[i]->transcribe);
    }
    std::vector<StatusOr<engine::Transcript>> results = executor.transcribe_batch(audios, options);
    const int size = static_cast<int>(together.size());
    for (size_t k = 0; k < together.size(); ++k) {
      if (k >= results.size()) {  // a broken executor contract is reported, never indexed past
        run.responses[together[k]] = internal_error("transcribe_batch returned " + std::to_string(results.size()) +
                                                    " results for " + std::to_string(together.size()) + " requests");
      } else if (results[k].ok()) {
        run.responses[together[k]] = response_for(std::move(*results[k]), size);
      } else {
        run.responses[together[k]] = results[k].status();
      }
    }
    run.batched = size;
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    PendingRequest& r = *batch[i];
    if (!r.on_segment) continue;
    StatusOr<engine::Transcript> t = executor.transcribe(r.audio, r.transcribe, r.on_segment);
    run.responses[i] =
        t.ok() ? StatusOr<ResponseData>(response_for(std::move(*t), 1)) : StatusOr<ResponseData>(t.status());
  }
  for (const PendingRequestPtr& r : batch) std::vector<float>().swap(r->audio);
  run.compute_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return run;
}

}  // namespace mmserve::serving
