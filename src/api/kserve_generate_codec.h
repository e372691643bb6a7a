// KServe v2's generate extension, as Triton has it: POST /v2/models/{m}/generate and /generate_stream bodies into
// the completions request the OpenAI routes use (so both share one set of checks), and the answers.
//
// Body: {"text_input": "...", "parameters": {...}} and the generation fields at the top level too, as Triton's
// generate endpoint maps top-level keys to model inputs (TensorRT-LLM's ensemble takes max_tokens, stop_words,
// bad_words there) and "parameters" to request parameters; a field given in both places is a 400. Fields (TRT-LLM /
// vLLM names): max_tokens (default 16), temperature, top_p, top_k, seed, stop (a string or a list; stop_words is the
// same), min_tokens, ignore_eos, repetition_penalty, presence_penalty, frequency_penalty, min_p; stream (a boolean,
// ignored: the route decides); bad_words only empty ("" or []); and, for a LLaVA, "image" at the top level: an image
// data URL or a list of them, one per "<image>" in text_input. Anything else is a 400 naming the keys.
// Answers: {"model_name", "model_version": "1", "text_output", "finish_reason", "prompt_tokens",
// "completion_tokens"}; a stream is `data: {"model_name", "model_version", "text_output": <delta>}` events and a
// last one with an empty text_output, the finish_reason and the token counts.
// Tests: tests/unit/api/kserve_generate_codec_test.cpp; fuzz: fuzz/kserve_generate_fuzz.cpp.
#pragma once

#include <string>

#include "api/openai_completions_codec.h"
#include "core/status.h"
#include "engine/llama_executor.h"

namespace mmserve::api {

// kInvalidArgument naming the field. The result's prompt is text_input, its model `model`.
StatusOr<CompletionRequest> parse_generate_request(const std::string& body, const std::string& model);

std::string encode_generate(const std::string& model, const engine::LlamaOutput& output);
// One `data: {...}\n\n` event with a piece of text.
std::string encode_generate_delta(const std::string& model, const std::string& text);
// The last event: no text, the finish reason and the counts.
std::string encode_generate_end(const std::string& model, const engine::LlamaOutput& output);
// An error after the stream started: `data: {"error": "..."}` (KServe's error shape).
std::string encode_generate_error_event(const std::string& message);

}  // namespace mmserve::api
