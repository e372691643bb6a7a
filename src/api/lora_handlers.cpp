// LoRA adapters over HTTP (issue 16; see handlers.h): vLLM's runtime loading endpoints and mmserve's registry.
//
//   POST /v1/load_lora_adapter   {"lora_name": "sql", "lora_path": "/adapters/sql", "base_model": "llama"?}
//   POST /v1/unload_lora_adapter {"lora_name": "sql", "fail_running": false?}
// answer 200 with vLLM's plain-text success line, or an OpenAI error: 400 for a malformed body or adapter
// (the adapter reader's message), 403 when the server was not started with --allow-runtime-lora-updating (they
// read any directory the server can, as vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING guards), 404 for an unknown base
// model or adapter, 409 for a name in use. An unload returns at once: requests already under the adapter finish
// with it, or with "fail_running": true (an mmserve extension) end at their next step with a 404
// error, an error event when streamed, saying the adapter was unloaded.
//   GET /v2/adapters -> {"adapters": [{"id", "parent", "modality", "rank", "target_modules", "hot_swappable",
//                       "loaded_on", "path", "bytes",
//                       "requests"}]}
// Tests: tests/e2e/lora_server_test.cpp (the real server with the PEFT fixtures, requests in flight).
#include "api/handlers.h"
#include "api/json_parse.h"
#include "api/json_writer.h"

namespace mmserve::api {
namespace {

constexpr ApiFamily kFamily = ApiFamily::kOpenAi;

StatusOr<std::string> string_field(const nlohmann::json& body, const char* key, bool required) {
  if (!body.contains(key) || body[key].is_null()) {
    if (required) return invalid_argument(std::string("'") + key + "' is required");
    return std::string();
  }
  if (!body[key].is_string() || body[key].get<std::string>().empty()) {
    return invalid_argument(std::string("'") + key + "' must be a non-empty string");
  }
  return body[key].get<std::string>();
}

}  // namespace

Reply handle_load_lora_adapter(const HandlerEnv& env, const httplib::Request& request, bool load) {
  if (!env.server.allow_runtime_lora_updating()) {
    return error_reply(kFamily, 403,
                       "loading and unloading LoRA adapters at run time is off (start the server with "
                       "--allow-runtime-lora-updating)");
  }
  StatusOr<nlohmann::json> body = parse_json(request.body);
  if (!body.ok()) return error_reply(kFamily, body.status());
  if (!body->is_object()) return error_reply(kFamily, invalid_argument("the body must be a JSON object"));
  StatusOr<std::string> name = string_field(*body, "lora_name", true);
  if (!name.ok()) return error_reply(kFamily, name.status());
  if (!load) {
    bool fail_running = false;  // an mmserve extension field
    if (body->contains("fail_running") && !(*body)["fail_running"].is_null()) {
      if (!(*body)["fail_running"].is_boolean()) {
        return error_reply(kFamily, invalid_argument("'fail_running' must be true or false"));
      }
      fail_running = (*body)["fail_running"].get<bool>();
    }
    const Status unloaded = env.server.unload_adapter(*name, fail_running);
    if (!unloaded.ok()) return error_reply(kFamily, unloaded);
    return Reply{200, "Success: LoRA adapter '" + *name + "' removed successfully.", "text/plain; charset=utf-8"};
  }
  StatusOr<std::string> path = string_field(*body, "lora_path", true);
  if (!path.ok()) return error_reply(kFamily, path.status());
  StatusOr<std::string> base = string_field(*body, "base_model", false);
  if (!base.ok()) return error_reply(kFamily, base.status());
  const Status loaded = env.server.load_adapter(*base, *name, *path);
  if (!loaded.ok()) {
    // A directory that is missing or unreadable is the client's mistake here, not a missing route.
    const Status status =
        loaded.code() == StatusCode::kNotFound && loaded.message().find("adapter_") != std::string::npos
            ? invalid_argument(loaded.message())
            : loaded;
    return error_reply(kFamily, status);
  }
  return Reply{200, "Success: LoRA adapter '" + *name + "' added successfully.", "text/plain; charset=utf-8"};
}

Reply handle_adapters(const HandlerEnv& env) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const serving::AdapterStatus& a : env.server.adapters()) {
    nlohmann::ordered_json e;
    e["id"] = a.info.name;
    e["parent"] = a.parent;
    e["modality"] = a.info.modality;
    e["rank"] = a.info.rank;
    e["target_modules"] = a.info.targets;
    e["hot_swappable"] = a.info.hot_swappable;
    e["loaded_on"] = a.loaded_on;
    e["path"] = a.info.dir;
    e["bytes"] = a.info.bytes;
    e["requests"] = a.info.requests;
    list.push_back(std::move(e));
  }
  nlohmann::ordered_json out;
  out["adapters"] = std::move(list);
  return Reply{200, dump_json(out)};
}

ResolvedModel resolve_model(const HandlerEnv& env, const std::string& requested) {
  std::optional<std::string> base = env.server.resolve_adapter(requested);
  if (!base) return {requested, ""};
  return {*base, requested};
}

}  // namespace mmserve::api
