// The OpenAI text-generation bodies: POST /v1/completions and /v1/chat/completions requests into engine::LlamaParams
// (plus the prompt), and the responses, non-streamed and as server-sent event chunks, in OpenAI's shapes (what the
// official `openai` client parses). vLLM's extra sampling fields are taken too (top_k, min_p, repetition_penalty,
// ignore_eos, min_tokens). What is refused, with a 400 naming the field: n != 1, best_of != 1, logprobs / top_logprobs,
// echo, suffix, tools, several prompts in one request, unknown roles' shapes are left to the chat template.
// Tests: tests/unit/api/openai_completions_codec_test.cpp; fuzz: fuzz/openai_completions_fuzz.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/llama_executor.h"

namespace mmserve::api {

struct CompletionRequest {
  std::string model;
  bool chat = false;
  std::optional<std::string> prompt;  // /v1/completions with a string prompt (else params->prompt_ids)
  std::shared_ptr<engine::LlamaParams> params = std::make_shared<engine::LlamaParams>();
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// `chat`: /v1/chat/completions (messages) else /v1/completions (prompt). kInvalidArgument naming the field;
// kUnimplemented for OpenAI features not written yet.
StatusOr<CompletionRequest> parse_completion_request(const std::string& body, bool chat);

// "cmpl-..." / "chatcmpl-..." plus 24 random hex digits.
std::string completion_id(bool chat);

struct CompletionUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

std::string encode_completion(const CompletionRequest& request, const std::string& id, int64_t created,
                              const engine::LlamaOutput& output);
// One `data: {...}\n\n` chunk with new text (chat: the first chunk also says role "assistant").
std::string encode_completion_chunk(const CompletionRequest& request, const std::string& id, int64_t created,
                                    const std::string& text, bool first);
// The last chunks: the finish reason, the usage when asked for, then `data: [DONE]`.
std::string encode_completion_end(const CompletionRequest& request, const std::string& id, int64_t created,
                                  const std::string& finish_reason, const CompletionUsage& usage);

}  // namespace mmserve::api
