// The OpenAI completions codecs (see openai_completions_codec.h).
#include "api/openai_completions_codec.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "api/json_parse.h"
#include "api/json_writer.h"

namespace mmserve::api {
namespace {

using nlohmann::json;

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

json usage_json(const CompletionUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

std::string event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

json base(const CompletionRequest& r, const std::string& id, int64_t created, bool chunk) {
  const char* object = r.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id}, {"object", object}, {"created", created}, {"model", r.model}};
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
    p.messages = *messages;
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
  if (n && *n != 1) return unimplemented("'n' must be 1 (one choice per request)");
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, integer(root, "best_of"));
  if (best_of && *best_of != 1) return unimplemented("'best_of' must be 1");
  if (const auto lp = root.find("logprobs"); lp != root.end() && !lp->is_null() && *lp != false && *lp != 0) {
    return unimplemented("'logprobs' is not supported yet");
  }
  ASSIGN_OR_RETURN(r.stream, boolean(root, "stream", false));
  if (const auto so = root.find("stream_options"); so != root.end() && !so->is_null()) {
    if (!so->is_object()) return invalid_argument("'stream_options' must be an object");
    ASSIGN_OR_RETURN(r.include_usage, boolean(*so, "include_usage", false));
  }
  return r;
}

std::string completion_id(bool chat) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string id = chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id.push_back(hex[rng() % 16]);
  return id;
}

std::string encode_completion(const CompletionRequest& r, const std::string& id, int64_t created,
                              const engine::LlamaOutput& out) {
  json j = base(r, id, created, false);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", out.finish_reason}};
  if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", out.text}};
  } else {
    choice["text"] = out.text;
  }
  j["choices"] = json::array({choice});
  j["usage"] = usage_json({static_cast<int64_t>(out.prompt_ids.size()), static_cast<int64_t>(out.ids.size())});
  return dump_json(j);
}

std::string encode_completion_chunk(const CompletionRequest& r, const std::string& id, int64_t created,
                                    const std::string& text, bool first) {
  json j = base(r, id, created, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (r.chat) {
    choice["delta"] = first ? json{{"role", "assistant"}, {"content", text}} : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  return event(j);
}

std::string encode_completion_end(const CompletionRequest& r, const std::string& id, int64_t created,
                                  const std::string& finish_reason, const CompletionUsage& usage) {
  json last = base(r, id, created, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (r.chat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  last["choices"] = json::array({choice});
  std::string out = event(last);
  if (r.include_usage) {
    json u = base(r, id, created, true);
    u["choices"] = json::array();
    u["usage"] = usage_json(usage);
    out += event(u);
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace mmserve::api
