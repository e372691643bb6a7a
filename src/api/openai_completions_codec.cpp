// The OpenAI completions codecs (see openai_completions_codec.h). Responses are built as ordered JSON: the keys in
// OpenAI's order, and completions' top_logprobs objects most likely first (JavaScript keeps insertion order).
#include "api/openai_completions_codec.h"

#include "api/chat_images.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "api/chat_images.h"
#include "api/json_parse.h"
#include "api/json_writer.h"

namespace mmserve::api {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // responses keep OpenAI's key order (and top_logprobs theirs)

StatusOr<double> number(const json& root, const char* key, double fallback) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return fallback;
  if (!it->is_number()) return invalid_argument(std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v)) return invalid_argument(std::string("'") + key + "' must be finite");
  return v;
}

StatusOr<std::optional<int64_t>> integer(const json& root, const char* key) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) return invalid_argument(std::string("'") + key + "' must be an integer");
  return std::optional<int64_t>(it->get<int64_t>());
}

StatusOr<bool> boolean(const json& root, const char* key, bool fallback) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return invalid_argument(std::string("'") + key + "' must be a boolean");
  return it->get<bool>();
}

ojson usage_json(const CompletionUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

std::string event(const ojson& j) { return "data: " + dump_json(j) + "\n\n"; }

ojson base(const CompletionRequest& r, const std::string& id, int64_t created, bool chunk) {
  const char* object = r.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id}, {"object", object}, {"created", created}, {"model", r.model}};
}

// As vLLM: -inf (a masked token) is not JSON, so log-probabilities are at least -9999.
double clamp_logprob(float v) { return std::isfinite(v) ? std::max(static_cast<double>(v), -9999.0) : -9999.0; }

// The token string of one id: the decode of that id alone, special tokens kept (what vLLM shows).
std::string token_string(const text::HfTokenizer* tokenizer, int32_t id) {
  if (tokenizer == nullptr) return "";
  StatusOr<std::string> s = tokenizer->decode({id}, /*skip_special_tokens=*/false);
  return s.ok() ? *s : std::string();
}

// Code points of valid UTF-8 (what Python's len, hence vLLM's text_offset, counts).
int64_t code_points(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

ojson utf8_bytes(const std::string& s) {
  ojson out = ojson::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// Completions' legacy shape over `lps`; `text_offset` advances by each token string's length.
ojson completion_logprobs(std::span<const engine::TokenLogprob> lps, const text::HfTokenizer* tok,
                          int64_t& text_offset) {
  ojson tokens = ojson::array(), values = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string token = token_string(tok, lp.id);
    tokens.push_back(token);
    values.push_back(clamp_logprob(lp.logprob));
    // The N most likely, most likely first, then the sampled token when it is not among them (OpenAI: "up to
    // logprobs + 1 elements"). Ids with the same string keep the first (highest) value.
    ojson top = ojson::object();
    bool chosen_listed = false;
    for (const auto& [id, value] : lp.top) {
      const std::string t = token_string(tok, id);
      if (!top.contains(t)) top[t] = clamp_logprob(value);
      chosen_listed = chosen_listed || id == lp.id;
    }
    if (!chosen_listed && !top.contains(token)) top[token] = clamp_logprob(lp.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += code_points(token);
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// Chat's shape: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
ojson chat_logprobs(std::span<const engine::TokenLogprob> lps, const text::HfTokenizer* tok) {
  ojson content = ojson::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string token = token_string(tok, lp.id);
    ojson top = ojson::array();
    for (const auto& [id, value] : lp.top) {
      const std::string t = token_string(tok, id);
      top.push_back({{"token", t}, {"logprob", clamp_logprob(value)}, {"bytes", utf8_bytes(t)}});
    }
    content.push_back(
        {{"token", token}, {"logprob", clamp_logprob(lp.logprob)}, {"bytes", utf8_bytes(token)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

}  // namespace

StatusOr<CompletionRequest> parse_completion_request(const std::string& body, bool chat) {
  ASSIGN_OR_RETURN(json root, parse_json(body));
  if (!root.is_object()) return invalid_argument("the request body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  const auto model = root.find("model");
  if (model == root.end() || !model->is_string() || model->get<std::string>().empty()) {
    return invalid_argument("'model' must be a non-empty string");
  }
  r.model = model->get<std::string>();
  engine::LlamaParams& p = *r.params;
  if (chat) {
    // The messages go to the chat template as sent, keys in order (tojson prints them in that order).
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
    const auto messages = ordered.find("messages");
    if (messages == ordered.end() || !messages->is_array() || messages->empty()) {
      return invalid_argument("'messages' must be a non-empty array");
    }
    for (const auto& m : *messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
        return invalid_argument("each message must be an object with a string 'role'");
      }
    }
    ASSIGN_OR_RETURN(p.messages, take_chat_images(*messages, ChatImageOptions{}, r.images));
    if (root.contains("tools") && !root["tools"].is_null()) {
      return unimplemented("'tools' are not supported yet");
    }
  } else {
    const auto prompt = root.find("prompt");
    if (prompt == root.end()) return invalid_argument("'prompt' is required");
    json one = *prompt;
    if (one.is_array() && one.size() == 1 && (one[0].is_string() || one[0].is_array())) one = one[0];
    if (one.is_string()) {
      r.prompt = one.get<std::string>();
      if (r.prompt->empty()) return invalid_argument("'prompt' is empty");
    } else if (one.is_array() && !one.empty() && std::all_of(one.begin(), one.end(), [](const json& x) {
                 return x.is_number_integer();
               })) {
      std::vector<int32_t> ids;
      for (const json& x : one) {
        const int64_t v = x.get<int64_t>();
        if (v < 0 || v > INT32_MAX) return invalid_argument("'prompt' token id " + std::to_string(v) + " is invalid");
        ids.push_back(static_cast<int32_t>(v));
      }
      p.prompt_ids = std::move(ids);
    } else if (one.is_array()) {
      return invalid_argument("'prompt' must be one string or one array of token ids (one prompt per request)");
    } else {
      return invalid_argument("'prompt' must be a string or an array of token ids");
    }
    ASSIGN_OR_RETURN(bool echo, boolean(root, "echo", false));
    if (echo) return unimplemented("'echo' is not supported");
    if (root.contains("suffix") && !root["suffix"].is_null()) return unimplemented("'suffix' is not supported");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, integer(root, chat ? "max_completion_tokens" : "max_tokens"));
  if (!max_tokens && chat) {
    ASSIGN_OR_RETURN(max_tokens, integer(root, "max_tokens"));
  }
  if (max_tokens) {
    if (*max_tokens < 1) return invalid_argument("'max_tokens' must be at least 1");
    p.max_tokens = *max_tokens;
  } else {
    p.max_tokens = chat ? 4096 : 16;  // OpenAI: 16 for completions; chat runs to the end (bounded by the context)
  }
  ASSIGN_OR_RETURN(p.sampling.temperature, number(root, "temperature", 1.0));
  ASSIGN_OR_RETURN(p.sampling.top_p, number(root, "top_p", 1.0));
  ASSIGN_OR_RETURN(p.sampling.min_p, number(root, "min_p", 0.0));
  ASSIGN_OR_RETURN(p.sampling.repetition_penalty, number(root, "repetition_penalty", 1.0));
  ASSIGN_OR_RETURN(p.sampling.presence_penalty, number(root, "presence_penalty", 0.0));
  ASSIGN_OR_RETURN(p.sampling.frequency_penalty, number(root, "frequency_penalty", 0.0));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, integer(root, "top_k"));
  if (top_k) p.sampling.top_k = *top_k;
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, integer(root, "seed"));
  if (seed) p.sampling.seed = static_cast<uint64_t>(*seed);
  RETURN_IF_ERROR(engine::validate_sampling(p.sampling));
  ASSIGN_OR_RETURN(p.ignore_eos, boolean(root, "ignore_eos", false));
  // mmserve's extension: "adapter": "auto" has the model's gate head pick the LoRA adapters (docs/lora.md).
  if (root.contains("adapter") && !root["adapter"].is_null()) {
    if (!root["adapter"].is_string() || root["adapter"].get<std::string>() != "auto") {
      return invalid_argument("'adapter' must be \"auto\" (name an adapter in 'model' instead)");
    }
    p.adapter = "auto";
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, integer(root, "min_tokens"));
  if (min_tokens) {
    if (*min_tokens < 0 || *min_tokens > p.max_tokens) {
      return invalid_argument("'min_tokens' must be in [0, max_tokens]");
    }
    p.min_tokens = *min_tokens;
  }
  if (const auto stop = root.find("stop"); stop != root.end() && !stop->is_null()) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 16) {
      for (const json& s : *stop) {
        if (!s.is_string()) return invalid_argument("'stop' must be a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      return invalid_argument("'stop' must be a string or an array of at most 16 strings");
    }
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> n, integer(root, "n"));
  if (n) {
    if (*n < 1 || *n > kChoicesMax) {
      return invalid_argument("'n' must be in [1, " + std::to_string(kChoicesMax) + "], got " + std::to_string(*n));
    }
    r.n = *n;
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, integer(root, "best_of"));
  if (best_of && *best_of != r.n) {
    return invalid_argument("'best_of' must equal 'n' (" + std::to_string(r.n) +
                            "): choosing the best of more candidates is not supported");
  }
  const std::string range = "[0, " + std::to_string(kLogprobsMax) + "]";
  if (chat) {
    ASSIGN_OR_RETURN(bool logprobs, boolean(root, "logprobs", false));
    ASSIGN_OR_RETURN(std::optional<int64_t> top, integer(root, "top_logprobs"));
    if (top && !logprobs) return invalid_argument("'top_logprobs' needs 'logprobs': true");
    if (top && (*top < 0 || *top > kLogprobsMax)) return invalid_argument("'top_logprobs' must be in " + range);
    if (logprobs) r.logprobs = top.value_or(0);
  } else {
    const auto lp = root.find("logprobs");
    if (lp != root.end() && !lp->is_null()) {
      if (!lp->is_number_integer() || lp->get<int64_t>() < 0 || lp->get<int64_t>() > kLogprobsMax) {
        return invalid_argument("'logprobs' must be an integer in " + range);
      }
      r.logprobs = lp->get<int64_t>();
    }
  }
  p.logprobs = r.logprobs;
  ASSIGN_OR_RETURN(r.stream, boolean(root, "stream", false));
  if (const auto so = root.find("stream_options"); so != root.end() && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    ASSIGN_OR_RETURN(r.include_usage, boolean(*so, "include_usage", false));
  }
  return r;
}

std::shared_ptr<engine::LlamaParams> choice_params(const CompletionRequest& r, int64_t index) {
  auto p = std::make_shared<engine::LlamaParams>(*r.params);
  if (p->sampling.seed) p->sampling.seed = *p->sampling.seed + static_cast<uint64_t>(index);
  return p;
}

std::string completion_id(bool chat) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string id = chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id.push_back(hex[rng() % 16]);
  return id;
}

CompletionUsage completion_usage(std::span<const engine::LlamaOutput* const> choices) {
  CompletionUsage u;
  if (!choices.empty()) u.prompt_tokens = static_cast<int64_t>(choices[0]->prompt_ids.size());
  for (const engine::LlamaOutput* out : choices) u.completion_tokens += static_cast<int64_t>(out->ids.size());
  return u;
}

namespace {

// The logprobs of `lps` in the request's shape, or null when not asked (or none to give).
ojson logprobs_json(const CompletionRequest& r, std::span<const engine::TokenLogprob> lps,
                    const text::HfTokenizer* tok, int64_t& text_offset) {
  if (r.logprobs < 0 || lps.empty()) return nullptr;
  return r.chat ? chat_logprobs(lps, tok) : completion_logprobs(lps, tok, text_offset);
}

ojson chunk_choice(const CompletionRequest& r, int64_t index, const std::string& text, bool role, ojson logprobs,
                   const ojson& finish_reason) {
  ojson choice = {{"index", index}};
  if (r.chat) {
    choice["delta"] = role ? ojson{{"role", "assistant"}, {"content", text}} : ojson{{"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason;
  return choice;
}

}  // namespace

nlohmann::ordered_json adapters_json(const engine::LlamaOutput& out) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < out.routed_adapters.size(); ++i) {
    list.push_back({{"name", out.routed_adapters[i]}, {"weight", out.routed_weights[i]}});
  }
  return list;
}

nlohmann::ordered_json routing_json(const engine::LlamaOutput& out) {
  ojson experts = ojson::array(), weights = ojson::array();
  const int64_t layers = out.routing_layers, k = out.routing_k;
  const int64_t tokens = layers * k > 0 ? static_cast<int64_t>(out.routing_experts.size()) / (layers * k) : 0;
  for (int64_t t = 0; t < tokens; ++t) {
    ojson e_layers = ojson::array(), w_layers = ojson::array();
    for (int64_t l = 0; l < layers; ++l) {
      ojson e = ojson::array(), w = ojson::array();
      for (int64_t j = 0; j < k; ++j) {
        e.push_back(out.routing_experts[(t * layers + l) * k + j]);
        w.push_back(out.routing_weights[(t * layers + l) * k + j]);
      }
      e_layers.push_back(std::move(e));
      w_layers.push_back(std::move(w));
    }
    experts.push_back(std::move(e_layers));
    weights.push_back(std::move(w_layers));
  }
  return {{"layers", layers}, {"top_k", k}, {"experts", std::move(experts)}, {"weights", std::move(weights)}};
}

std::string encode_completion(const CompletionRequest& r, const std::string& id, int64_t created,
                              std::span<const engine::LlamaOutput* const> choices) {
  ojson j = base(r, id, created, false);
  j["choices"] = ojson::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const engine::LlamaOutput& out = *choices[i];
    ojson choice = {{"index", static_cast<int64_t>(i)}};
    if (r.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", out.text}};
    } else {
      choice["text"] = out.text;
    }
    int64_t offset = 0;
    choice["logprobs"] = logprobs_json(r, out.logprobs, out.tokenizer.get(), offset);
    if (r.logprobs >= 0 && choice["logprobs"].is_null()) {  // asked, nothing generated: empty lists, not null
      choice["logprobs"] = r.chat ? ojson{{"content", ojson::array()}}
                                  : ojson{{"tokens", ojson::array()},
                                          {"token_logprobs", ojson::array()},
                                          {"top_logprobs", ojson::array()},
                                          {"text_offset", ojson::array()}};
    }
    choice["finish_reason"] = out.finish_reason;
    if (out.routing_k > 0) choice["routing"] = routing_json(out);  // x-mmserve-trace-routing: 1 (docs/api.md)
    if (!out.routed_adapters.empty()) choice["adapters"] = adapters_json(out);  // adapter "auto" (docs/api.md)
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(completion_usage(choices));
  return dump_json(j);
}

std::string encode_completion_chunk(const CompletionRequest& r, const std::string& id, int64_t created,
                                    ChoiceStream& state, const engine::TextDelta& delta,
                                    const text::HfTokenizer* tokenizer) {
  ojson j = base(r, id, created, true);
  ojson lp = logprobs_json(r, delta.logprobs, tokenizer, state.text_offset);
  state.ids_sent += delta.ids.size();
  j["choices"] = ojson::array({chunk_choice(r, state.index, delta.text, !state.sent_any, std::move(lp), nullptr)});
  state.sent_any = true;
  return event(j);
}

std::string encode_choice_end(const CompletionRequest& r, const std::string& id, int64_t created,
                              ChoiceStream& state, const engine::LlamaOutput& out) {
  std::string events;
  if (r.chat && !state.sent_any) {  // the role comes first, even with no text
    ojson role = base(r, id, created, true);
    role["choices"] = ojson::array({chunk_choice(r, state.index, "", true, nullptr, nullptr)});
    events += event(role);
    state.sent_any = true;
  }
  std::span<const engine::TokenLogprob> rest;
  if (state.ids_sent < out.logprobs.size()) rest = std::span(out.logprobs).subspan(state.ids_sent);
  state.ids_sent = out.ids.size();
  ojson last = base(r, id, created, true);
  ojson choice = chunk_choice(r, state.index, "", false, logprobs_json(r, rest, out.tokenizer.get(), state.text_offset),
                              out.finish_reason);
  if (r.chat) choice["delta"] = ojson::object();
  if (out.routing_k > 0) choice["routing"] = routing_json(out);  // the whole answer's, on its last chunk
  last["choices"] = ojson::array({std::move(choice)});
  return events + event(last);
}

std::string encode_stream_end(const CompletionRequest& r, const std::string& id, int64_t created,
                              const CompletionUsage& usage) {
  std::string out;
  if (r.include_usage) {
    ojson u = base(r, id, created, true);
    u["choices"] = ojson::array();
    u["usage"] = usage_json(usage);
    out += event(u);
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace mmserve::api
