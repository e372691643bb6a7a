// The OpenAI text-generation bodies: POST /v1/completions and /v1/chat/completions requests into engine::LlamaParams
// (plus the prompt), and the responses, non-streamed and as server-sent event chunks, in OpenAI's shapes (what the
// official `openai` client parses). vLLM's extra sampling fields are taken too (top_k, min_p, repetition_penalty,
// ignore_eos, min_tokens). `n` choices (1..16; `best_of` must equal n) are n engine requests the handler fans out;
// the encoders take every choice's output. Log-probabilities: completions' `logprobs: N` (the legacy
// {tokens, token_logprobs, top_logprobs, text_offset}) and chat's `logprobs: true` + `top_logprobs: N`
// ({content: [{token, logprob, bytes, top_logprobs}]}), N in [0, 20] (vLLM's bound; OpenAI's is 5 for completions);
// token strings are the decode of each single id, as vLLM shows them. Refused with a 400 naming the field: echo,
// suffix, tools, several prompts in one request; unknown roles' shapes are left to the chat template. Chat content
// parts of type image_url carry images (data URLs) for a LLaVA: api/chat_images.h.
// Tests: tests/unit/api/openai_completions_codec_test.cpp; fuzz: fuzz/openai_completions_fuzz.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/llama_executor.h"

namespace mmserve::api {

inline constexpr int64_t kChoicesMax = 16;   // `n`
inline constexpr int64_t kLogprobsMax = 20;  // `logprobs` (completions), `top_logprobs` (chat)

struct CompletionRequest {
  std::string model;
  bool chat = false;
  std::optional<std::string> prompt;  // /v1/completions with a string prompt (else params->prompt_ids)
  std::shared_ptr<engine::LlamaParams> params = std::make_shared<engine::LlamaParams>();
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int64_t n = 1;               // choices, each its own engine request
  // -1: no logprobs; else the number of alternatives per token (completions' `logprobs`, chat's `top_logprobs`,
  // 0 for chat's `logprobs: true` alone). The same value is in params->logprobs.
  int64_t logprobs = -1;
  // Chat: the images of the messages' image_url parts, in order (api/chat_images.h); each part is {"type": "image"}
  // in params->messages.
  std::vector<engine::InputItem> images;
};

// `chat`: /v1/chat/completions (messages) else /v1/completions (prompt). kInvalidArgument naming the field;
// kUnimplemented for OpenAI features not written yet.
StatusOr<CompletionRequest> parse_completion_request(const std::string& body, bool chat);

// The params of choice `index` of n: a copy of the request's, whose seed (when one was given) is seed + index, so
// that the n choices differ and the request stays reproducible.
std::shared_ptr<engine::LlamaParams> choice_params(const CompletionRequest& request, int64_t index);

// "cmpl-..." / "chatcmpl-..." plus 24 random hex digits.
std::string completion_id(bool chat);

struct CompletionUsage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// The usage of n choices: the prompt counted once (as OpenAI does), the generated tokens summed.
CompletionUsage completion_usage(std::span<const engine::LlamaOutput* const> choices);

// The whole response: choice i is choices[i] (non-null, from the same request).
// The routing trace of a mixture-of-experts answer (x-mmserve-trace-routing): {"layers": L, "top_k": k,
// "experts": [token][layer][k], "weights": [token][layer][k]}.
nlohmann::ordered_json routing_json(const engine::LlamaOutput& out);
// Gate routing's choice ([{"name", "weight"}], by descending weight): each choice's `adapters` extension field.
nlohmann::ordered_json adapters_json(const engine::LlamaOutput& out);

// A choice whose output carries a routing trace (x-mmserve-trace-routing on a mixture-of-experts model) gets
// "routing": {"layers": L, "top_k": k, "experts": [token][layer][k], "weights": [token][layer][k]} (docs/api.md);
// streamed, on the choice's last chunk.
std::string encode_completion(const CompletionRequest& request, const std::string& id, int64_t created,
                              std::span<const engine::LlamaOutput* const> choices);

// A stream's state per choice: its index, whether a chunk was sent (chat's first says the role), how many of its
// ids the chunks have carried logprobs for, and the completions `text_offset` reached.
struct ChoiceStream {
  int64_t index = 0;
  bool sent_any = false;
  size_t ids_sent = 0;
  int64_t text_offset = 0;
};

// One `data: {...}\n\n` chunk of choice `state.index` with the delta's text and, when asked, the logprobs of the
// delta's ids (token strings from `tokenizer`; required then).
std::string encode_completion_chunk(const CompletionRequest& request, const std::string& id, int64_t created,
                                    ChoiceStream& state, const engine::TextDelta& delta,
                                    const text::HfTokenizer* tokenizer);
// The last chunk of one choice: its finish reason and the logprobs of its ids no chunk carried yet (those the
// detokenizer held back: a stop string, EOS). Chat: preceded by the role chunk when the choice sent nothing.
std::string encode_choice_end(const CompletionRequest& request, const std::string& id, int64_t created,
                              ChoiceStream& state, const engine::LlamaOutput& output);
// After every choice ended: the usage chunk when asked for, then `data: [DONE]`.
std::string encode_stream_end(const CompletionRequest& request, const std::string& id, int64_t created,
                              const CompletionUsage& usage);

}  // namespace mmserve::api
