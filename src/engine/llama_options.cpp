// LlamaExecutor::create_for_server (see llama_executor.h): the LlamaOptions keys of a model's mmserve.yaml, each
// checked (unknown keys, types, values); moved out of llama_executor.cpp as it was.
#include <filesystem>

#include "core/json_config.h"
#include "engine/families.h"
#include "engine/llama_executor.h"

namespace mmserve::engine {

StatusOr<std::unique_ptr<Executor>> LlamaExecutor::create_for_server(const std::string& model_dir,
                                                                     const ExecutorOptions& options,
                                                                     const nlohmann::json& family_config) {
  RETURN_IF_ERROR(check_known_keys(family_config,
                                   {"block_size", "kv_cache_bytes", "kv_cache_dtype", "embeddings_on_host", "gpu_memory_utilization", "max_num_seqs",
                                    "max_num_batched_tokens", "max_model_len", "enable_prefix_caching",
                                    "enable_chunked_prefill", "enable_continuous_batching", "encoder_cache_bytes",
                                    "adapters", "max_loras", "max_lora_rank", "max_cpu_loras", "gate", "adapter_routing",
                                    "gate_distill", "gate_distill_lr", "gate_distill_dir", "gate_distill_interval_ms",
                                    "gate_distill_min_samples"},
                                   "Llama-family"));
  LlamaOptions llama;
  if (family_config.is_object()) {
    ASSIGN_OR_RETURN(JsonObject o, JsonObject::wrap(family_config, "mmserve.yaml options"));
    ASSIGN_OR_RETURN(llama.block_size, o.get_int_or("block_size", llama.block_size));
    ASSIGN_OR_RETURN(llama.kv_cache_bytes, o.get_int_or("kv_cache_bytes", llama.kv_cache_bytes));
    ASSIGN_OR_RETURN(llama.kv_cache_dtype, o.get_string_or("kv_cache_dtype", llama.kv_cache_dtype));
    ASSIGN_OR_RETURN(llama.embeddings_on_host, o.get_bool_or("embeddings_on_host", llama.embeddings_on_host));
    ASSIGN_OR_RETURN(llama.gpu_memory_utilization, o.get_double_or("gpu_memory_utilization", llama.gpu_memory_utilization));
    ASSIGN_OR_RETURN(llama.max_num_seqs, o.get_int_or("max_num_seqs", llama.max_num_seqs));
    ASSIGN_OR_RETURN(llama.max_num_batched_tokens, o.get_int_or("max_num_batched_tokens", llama.max_num_batched_tokens));
    ASSIGN_OR_RETURN(llama.max_model_len, o.get_int_or("max_model_len", llama.max_model_len));
    ASSIGN_OR_RETURN(llama.enable_prefix_caching, o.get_bool_or("enable_prefix_caching", llama.enable_prefix_caching));
    ASSIGN_OR_RETURN(llama.enable_chunked_prefill, o.get_bool_or("enable_chunked_prefill", llama.enable_chunked_prefill));
    ASSIGN_OR_RETURN(llama.enable_continuous_batching,
                     o.get_bool_or("enable_continuous_batching", llama.enable_continuous_batching));
    ASSIGN_OR_RETURN(llama.encoder_cache_bytes, o.get_int_or("encoder_cache_bytes", llama.encoder_cache_bytes));
    ASSIGN_OR_RETURN(llama.max_loras, o.get_int_or("max_loras", llama.max_loras));
    ASSIGN_OR_RETURN(llama.max_lora_rank, o.get_int_or("max_lora_rank", llama.max_lora_rank));
    ASSIGN_OR_RETURN(llama.max_cpu_loras, o.get_int_or("max_cpu_loras", llama.max_cpu_loras));
    ASSIGN_OR_RETURN(llama.gate, o.get_string_or("gate", ""));
    ASSIGN_OR_RETURN(const std::string routing, o.get_string_or("adapter_routing", "none"));
    if (routing != "none" && routing != "gate") {
      return invalid_argument("mmserve.yaml adapter_routing: '" + routing + "' (none or gate)");
    }
    llama.route_by_gate = routing == "gate";
    if (llama.route_by_gate && llama.gate.empty()) {
      return invalid_argument("mmserve.yaml adapter_routing: gate needs a gate head (gate: gate.safetensors)");
    }
    if (!llama.gate.empty() && std::filesystem::path(llama.gate).is_relative()) {
      llama.gate = (std::filesystem::path(model_dir) / llama.gate).string();
    }
    ASSIGN_OR_RETURN(llama.gate_distill, o.get_bool_or("gate_distill", llama.gate_distill));
    ASSIGN_OR_RETURN(llama.gate_distill_lr, o.get_double_or("gate_distill_lr", llama.gate_distill_lr));
    ASSIGN_OR_RETURN(llama.gate_distill_dir, o.get_string_or("gate_distill_dir", ""));
    ASSIGN_OR_RETURN(llama.gate_distill_interval_ms,
                     o.get_int_or("gate_distill_interval_ms", llama.gate_distill_interval_ms));
    ASSIGN_OR_RETURN(llama.gate_distill_min_samples,
                     o.get_int_or("gate_distill_min_samples", llama.gate_distill_min_samples));
    if (!llama.gate_distill && (o.has("gate_distill_lr") || o.has("gate_distill_dir") ||
                                o.has("gate_distill_interval_ms") || o.has("gate_distill_min_samples"))) {
      return invalid_argument("mmserve.yaml options: gate_distill_* keys without gate_distill: true");
    }
    if (llama.gate_distill && llama.gate_distill_dir.empty()) {
      return invalid_argument(
          "mmserve.yaml gate_distill: true needs gate_distill_dir (where the distilled head and the prototypes are "
          "kept across restarts)");
    }
    if (!llama.gate_distill_dir.empty() && std::filesystem::path(llama.gate_distill_dir).is_relative()) {
      llama.gate_distill_dir = (std::filesystem::path(model_dir) / llama.gate_distill_dir).string();
    }
    // adapters: {name: directory}, a relative directory under the model's (vLLM's --lora-modules, per model).
    if (o.has("adapters")) {
      const nlohmann::json& a = family_config["adapters"];
      if (!a.is_object()) return invalid_argument("mmserve.yaml options: adapters must map names to directories");
      for (const auto& [name, dir] : a.items()) {
        if (!dir.is_string()) return invalid_argument("mmserve.yaml options: adapters." + name + " must be a directory");
        std::filesystem::path path(dir.get<std::string>());
        if (path.is_relative()) path = std::filesystem::path(model_dir) / path;
        llama.adapters.emplace_back(name, path.string());
      }
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaExecutor> e, create(model_dir, options, llama));
  return std::unique_ptr<Executor>(std::move(e));
}

}  // namespace mmserve::engine
