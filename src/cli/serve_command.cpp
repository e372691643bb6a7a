// `mmserve serve`: composes the serving layer (InferenceServer) and the HTTP api (HttpServer) into a process
// with the lifecycle Kubernetes expects.
//
// Order: block SIGTERM/SIGINT in every thread (the main thread waits for them with sigwait), build the
// ServerConfig (--config YAML, then flags), write the demo CLIP into a temporary repository when no
// --model-repository is given, bind and start listening (live at once; "mmserve: serving on http://H:P" goes to
// stderr), then load the models on a separate thread (ready once loaded and warmed). On the first SIGTERM or
// SIGINT: stop accepting and close idle connections (health routes answer 503 from then on), let every request
// already received be processed and answered (serving still admits them: a request whose body was still
// arriving is in flight too), then InferenceServer::drain() for anything serving still holds, all within
// --drain-timeout; exit 0 (1 when the timeout passed with work left). A second signal exits at once. Before
// any thread starts, the NCCL environment is set (core/cuda/nccl_env.h: defaults, NCCL_NVLS_ENABLE=0 forced);
// the topology monitor (core/cuda/topology.h) runs on its own thread and feeds /metrics and
// GET /v2/debug/topology. Tests:
// tests/e2e/server_test.cpp (SIGTERM with a request in flight -> it completes, exit code 0),
// tests/e2e/kserve_client_test.py.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "api/http_server.h"
#include "cli/commands.h"
#include "core/cuda/nccl_env.h"
#include "core/cuda/topology.h"
#include "core/tensor.h"
#include "models/clip/clip_demo.h"
#include "models/llama/llama2c.h"
#include "models/sam/sam_demo.h"
#include "serving/inference_server.h"
#include "serving/serving_metrics.h"

namespace mmserve::cli {
namespace {

namespace fs = std::filesystem;

// The defaults of the serve flags (commands.h): a flag still at its default leaves the --config value.
const ServeArgs kDefaults;

// A temporary directory removed when it goes out of scope.
class TempDir {
 public:
  StatusOr<std::string> create() {
    std::string pattern = (fs::temp_directory_path() / "mmserve-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return internal_error("cannot create a temporary directory");
    path_ = pattern;
    return path_;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }

 private:
  std::string path_;
};

StatusOr<serving::ServerConfig> server_config(const ServeArgs& args) {
  serving::ServerConfig config;
  if (!args.config_file.empty()) {
    ASSIGN_OR_RETURN(config, serving::load_server_config(args.config_file));
  }
  if (!args.model_repository.empty()) config.model_repository = args.model_repository;
  if (!args.models.empty()) config.models_to_load = args.models;
  if (!args.device.empty()) {
    ASSIGN_OR_RETURN(mmserve::Device device, mmserve::parse_device(args.device));
    config.device_override = device.to_string();
  }
  if (args.policy != kDefaults.policy || args.config_file.empty()) {
    config.policy = args.policy == "fifo" ? serving::SchedulingPolicy::kFifo : serving::SchedulingPolicy::kQos;
  }
  if (args.max_image_pixels != kDefaults.max_image_pixels || args.config_file.empty()) {
    config.max_image_pixels = args.max_image_pixels;
  }
  for (const std::string& m : args.lora_modules) {  // NAME=DIR or NAME=DIR@MODEL
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      return invalid_argument("--lora-modules '" + m + "': expected NAME=DIR or NAME=DIR@MODEL");
    }
    serving::ServerConfig::LoraModuleSpec spec;
    spec.name = m.substr(0, eq);
    spec.dir = m.substr(eq + 1);
    if (const size_t at = spec.dir.rfind('@'); at != std::string::npos) {
      spec.model = spec.dir.substr(at + 1);
      spec.dir.resize(at);
    }
    config.lora_modules.push_back(std::move(spec));
  }
  config.allow_runtime_lora_updating = args.allow_runtime_lora_updating;
  return config;
}

StatusOr<api::HttpServerOptions> http_options(const ServeArgs& args) {
  api::HttpServerOptions options;
  options.host = args.host;
  options.port = args.port;
  if (args.http_threads < 0 || args.http_threads > 4096) return invalid_argument("--http-threads must be 0..4096");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.transport.threads = args.http_threads > 0
                                  ? args.http_threads
                                  : std::max(512, 16 * cores);  // a waiting request holds a worker: more workers than
                                                                // queue slots, so overload becomes 429s
  if (!(args.max_body_mb > 0) || args.max_body_mb > 16384)
    return invalid_argument("--max-body-mb must be in (0, 16384]");
  options.transport.body_bytes_max = static_cast<size_t>(args.max_body_mb * 1024 * 1024);
  for (const std::string& key : args.api_keys) RETURN_IF_ERROR(options.keys.add(key).with_context("--api-key"));
  if (!args.api_keys_file.empty()) RETURN_IF_ERROR(options.keys.add_file(args.api_keys_file));
  options.access_log_path = args.access_log;
  return options;
}

// Topology telemetry (docs/architecture.md "Topology"): on unless MMSERVE_TOPOLOGY=0; the start-up bandwidth
// matrix copies MMSERVE_TOPOLOGY_BANDWIDTH_MIB (default 256; 0 skips it) between every ordered GPU pair.
// Environment variables rather than flags because the flag set (commands.h) is shared with other work in flight.
StatusOr<std::optional<TopologyOptions>> topology_options() {
  const char* on = std::getenv("MMSERVE_TOPOLOGY");
  if (on != nullptr && std::string(on) == "0") return std::optional<TopologyOptions>();
  TopologyOptions options;
  if (const char* mib = std::getenv("MMSERVE_TOPOLOGY_BANDWIDTH_MIB"); mib != nullptr) {
    char* end = nullptr;
    const long value = std::strtol(mib, &end, 10);
    if (end == mib || *end != '\0' || value < 0 || value > 16384) {
      return invalid_argument("MMSERVE_TOPOLOGY_BANDWIDTH_MIB must be an integer in 0..16384");
    }
    options.bandwidth_bytes = static_cast<uint64_t>(value) << 20;
  }
  return std::optional<TopologyOptions>(options);
}

std::string url_of(const std::string& host, int port) {
  const bool ipv6 = host.find(':') != std::string::npos;
  return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

int run_serve(const ServeArgs& args) {
  // Before any thread exists, so that every thread inherits the mask and only sigwait() sees the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the process
  // Still single-threaded: the NCCL defaults (and NCCL_NVLS_ENABLE=0, forced) reach NCCL and every child.
  std::fprintf(stderr, "mmserve: NCCL environment: %s\n", describe_nccl_environment(apply_nccl_environment()).c_str());

  if (!(args.drain_timeout_s >= 0)) return fail("--drain-timeout must be >= 0");
  StatusOr<serving::ServerConfig> config = server_config(args);
  if (!config.ok()) return fail(config.status().message());
  StatusOr<api::HttpServerOptions> options = http_options(args);
  if (!options.ok()) return fail(options.status().message());
  // Under qos, requests labelled below priority 1 are read, parsed and answered by a lower-priority worker set.
  if (config->policy == serving::SchedulingPolicy::kQos) options->transport.background_nice = config->background_nice;

  TempDir demo_repository;
  if (config->model_repository.empty()) {
    StatusOr<std::string> dir = demo_repository.create();
    if (!dir.ok()) return fail(dir.status().message());
    const Status written = models::write_demo_clip(*dir + "/demo-clip");
    if (!written.ok()) return fail("writing the demo model: " + written.message());
    const Status sam = models::write_demo_sam(*dir + "/demo-sam");
    if (!sam.ok()) return fail("writing the demo SAM: " + sam.message());
    const Status stories = models::write_demo_stories(*dir + "/stories260K");
    if (!stories.ok()) return fail("writing the demo decoder: " + stories.message());
    config->model_repository = *dir;
    std::fprintf(stderr,
                 "mmserve: no --model-repository: serving the built-in demo CLIP as 'demo-clip' and the demo SAM "
                 "as 'demo-sam' (random weights), and llama2.c's real stories260K as 'stories260K' "
                 "(POST /v1/completions)\n");
  }

  StatusOr<std::unique_ptr<serving::InferenceServer>> server = serving::InferenceServer::create(*config);
  if (!server.ok()) return fail(server.status().message());
  StatusOr<std::optional<TopologyOptions>> topology = topology_options();
  if (!topology.ok()) return fail(topology.status().message());
  std::unique_ptr<serving::TopologyMetrics> topology_metrics;
  std::unique_ptr<TopologyMonitor> topology_monitor;  // reset before the server (its callback writes metrics)
  if (topology->has_value()) {
    topology_metrics = std::make_unique<serving::TopologyMetrics>((*server)->metrics());
    topology_monitor = std::make_unique<TopologyMonitor>(**topology);
    topology_monitor->set_on_sample([m = topology_metrics.get()](const Topology& t) { m->publish(t); });
    topology_monitor->start();
    options->topology = topology_monitor.get();
  }
  StatusOr<std::unique_ptr<api::HttpServer>> http = api::HttpServer::create(**server, std::move(*options));
  if (!http.ok()) return fail(http.status().message());
  if (Status bound = (*http)->bind(); !bound.ok()) return fail(bound.message());

  std::thread accept_thread([&] { (*http)->run(); });
  std::fprintf(stderr, "mmserve: serving on %s\n", url_of(args.host, (*http)->port()).c_str());

  std::thread loader([&] {
    const Status started = (*server)->start();
    if (!started.ok()) {
      std::fprintf(stderr, "mmserve: error: %s (serving, not ready)\n", started.message().c_str());
    } else if ((*server)->ready()) {
      std::fprintf(stderr, "mmserve: ready\n");
    } else {
      std::fprintf(stderr, "mmserve: some models failed to load (see POST /v2/repository/index); not ready\n");
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "mmserve: %s: draining (at most %.0f s)\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM",
               args.drain_timeout_s);
  std::thread([signals] {  // an impatient second signal ends the process now
    int again = 0;
    sigwait(&signals, &again);
    std::fprintf(stderr, "mmserve: second signal: exiting without draining\n");
    std::_Exit(1);
  })
      .detach();

  // HTTP first: requests already received (even those still reading their body) are submitted and answered
  // while serving still admits them; then serving drains whatever else it holds.
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(args.drain_timeout_s * 1000));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  (*http)->begin_shutdown();
  const bool answered = (*http)->finish_shutdown(timeout);
  const auto left =
      std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
               std::chrono::milliseconds(0));
  const bool drained = (*server)->drain(left);
  if (!answered || !drained) {
    std::fprintf(stderr, "mmserve: drain timed out with requests in flight; exiting\n");
    std::fflush(nullptr);
    std::_Exit(1);
  }
  accept_thread.join();
  loader.join();
  http->reset();
  topology_monitor.reset();
  server->reset();
  std::fprintf(stderr, "mmserve: stopped\n");
  return 0;
}

}  // namespace mmserve::cli
