// GPU topology telemetry (SPEC 2.1): which GPUs a node has, how they are wired (NVLink links, P2P access), how
// fast copies between them really are, and how busy the NVLink and InfiniBand links are.
//
// Sources, all optional, each failure recorded as a reason instead of an error that stops the server:
//   - NVML, loaded at run time with dlopen("libnvidia-ml.so.1") (the driver's library), so the binary has no
//     link-time dependency on it and runs on CPU-only machines and in CI: per GPU its name, PCI bus id and
//     memory; per NVLink link its state, remote PCI bus id (-> the remote GPU's index) and version; and the
//     cumulative data counters NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (field ids 138/139, KiB, per link via
//     scopeId = link) read with nvmlDeviceGetFieldValues.
//   - The CUDA runtime (builds with MMSERVE_HAS_CUDA): cudaDeviceCanAccessPeer for every ordered pair, and a
//     measured copy bandwidth matrix (cudaMemcpyPeerAsync of `bandwidth_bytes` between every ordered pair, a
//     device-local copy on the diagonal), skippable because it costs time at start-up.
//   - InfiniBand port counters from sysfs: <root>/<dev>/ports/<n>/counters/port_xmit_data and port_rcv_data.
//     The IB spec counts these in units of 4 octets (PortXmitData/PortRcvData are "octets divided by 4"), so
//     the bytes are counter * 4. The rate is the document's formula exactly (calc_ib_bandwidth below) over the
//     bytes moved in a sampling interval.
// The GPU list is in CUDA ordinal order when CUDA sees GPUs (what the engine's `device: cuda:N` means), with
// NVML's data joined by PCI bus id; NVML's order otherwise. P2P and bandwidth matrices use the same indices.
// Tests: tests/unit/core/topology_test.cpp (fake sysfs trees, NVML absent, the formula), and
// tests/unit/core/topology_gpu_test.cpp (skipped without a GPU).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"

namespace mmserve {

// The document's (SPEC 2.1) formula, exactly: the mean of both directions' bytes over the interval, in GB/s
// with GB = 1024^3 bytes. tx_bytes/rx_bytes are the bytes moved during the interval (differences of the
// cumulative counters). Precondition: interval_sec > 0 (the sampler never calls it otherwise).
double calc_ib_bandwidth(double tx_bytes, double rx_bytes, double interval_sec);

// "0000:1b:00.0" for any of NVML's "00000000:1B:00.0", CUDA's "0000:1B:00.0" or "1b:00.0"; empty when `bus_id`
// is not a PCI address (so two sources compare equal exactly when they name the same device).
std::string normalize_pci_bus_id(const std::string& bus_id);

// ---- InfiniBand (sysfs) ----

// One port's cumulative counters as read at one moment. `error` is set (and the counters are 0) when the
// port's files were missing or unreadable; the other ports are still read.
struct IbPortCounters {
  std::string device;  // "mlx5_0"
  int port = 0;
  uint64_t xmit_bytes = 0;  // port_xmit_data * 4
  uint64_t rcv_bytes = 0;   // port_rcv_data * 4
  bool saturated = false;   // a 32-bit counter stuck at 0xffffffff (the IB spec's counters saturate, not wrap)
  std::string error;
};

// Every port under `sysfs_root` (normally /sys/class/infiniband). A root that does not exist means "no
// InfiniBand here": an empty list, not an error. kInvalidArgument when the root exists but is not a directory.
StatusOr<std::vector<IbPortCounters>> read_ib_counters(const std::string& sysfs_root);

// One port's rate over an interval.
struct IbPortRate {
  std::string device;
  int port = 0;
  double gbps = 0.0;                         // calc_ib_bandwidth(delta xmit bytes, delta rcv bytes, interval)
  double xmit_bytes = 0.0, rcv_bytes = 0.0;  // the deltas
  std::string error;                         // set when no rate could be computed (the value is then 0)
};

// Rates for the ports of `after`, matched with `before` by (device, port). A counter that went backwards (a
// reset, a wrap of a counter that should saturate), a saturated counter, a port missing from `before` or a
// read error give a rate with `error` set. kInvalidArgument when interval_sec is not > 0.
StatusOr<std::vector<IbPortRate>> ib_port_rates(const std::vector<IbPortCounters>& before,
                                                const std::vector<IbPortCounters>& after, double interval_sec);

// ---- GPUs, links, matrices ----

struct NvLinkInfo {
  int link = 0;
  bool active = false;
  std::string remote_pci_bus_id;  // normalized; empty when NVML does not say
  int remote_gpu = -1;            // index into Topology::gpus; -1 for an NVSwitch or a GPU not in the list
  int version = 0;                // NVLink version; 0 when NVML does not say
  // Cumulative data counters (bytes, from KiB) and the rates over the last sampling interval (GB/s, 1024^3).
  bool counters_valid = false;
  uint64_t tx_bytes = 0, rx_bytes = 0;
  double tx_gbps = 0.0, rx_gbps = 0.0;
};

struct GpuInfo {
  int index = 0;  // CUDA ordinal when CUDA sees the GPU, else NVML's index
  std::string name;
  std::string pci_bus_id;  // normalized
  uint64_t memory_total_bytes = 0;
  std::vector<NvLinkInfo> nvlinks;  // links NVML reports (active or not)
  std::string nvlink_reason;        // why there are no links or counters (NVML absent, not supported)
};

struct Topology {
  std::vector<GpuInfo> gpus;
  std::string gpus_reason;  // why `gpus` is empty (no NVML, no driver, no GPU)
  std::string nvml_reason;  // why NVML's data is missing (empty when NVML answered)
  // p2p[i][j]: cudaDeviceCanAccessPeer(i, j) (the diagonal is true); empty with a reason without CUDA.
  std::vector<std::vector<bool>> p2p;
  std::string p2p_reason;
  // bandwidth_gbps[i][j]: measured copy GB/s (1024^3) from GPU i to GPU j; empty with a reason when skipped.
  std::vector<std::vector<double>> bandwidth_gbps;
  uint64_t bandwidth_bytes = 0;  // the copy size used
  std::string bandwidth_reason;
  std::vector<IbPortRate> ib_ports;
  std::string ib_reason;  // "no InfiniBand devices under ...", "first sample pending", errors
  double sample_interval_s = 0.0;
  std::vector<std::string> errors;  // anything else that went wrong, for the debug view
};

// NVML discovery into `topology` (gpus merged by PCI bus id, links, remote indices). Never fails: a missing
// library or a failing call is recorded in nvml_reason/nvlink_reason. `library` is injectable for tests.
void discover_nvml(Topology& topology, const std::string& library = "libnvidia-ml.so.1");

// Reads the NVLink data counters of every active link and sets the rates from `previous` (same topology, an
// earlier sample taken `interval_s` before); rates stay 0 on the first sample.
void sample_nvlink_counters(Topology& topology, const Topology* previous, double interval_s,
                            const std::string& library = "libnvidia-ml.so.1");

// CUDA: the GPUs CUDA sees (appended to an empty `gpus`, or used to re-index NVML's by PCI bus id), the P2P
// matrix and, when bandwidth_bytes > 0, the measured bandwidth matrix. Without CUDA (a CPU build, no driver)
// the reasons say so.
void discover_cuda(Topology& topology);
void measure_copy_bandwidth(Topology& topology, uint64_t bandwidth_bytes);

struct TopologyOptions {
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string ib_sysfs_root = "/sys/class/infiniband";
  uint64_t bandwidth_bytes = 256ull << 20;  // 0 skips the measured bandwidth matrix
  double sample_interval_s = 5.0;           // IB and NVLink counter sampling
};

// Discovery once (on its own thread, so start-up is not held up by the bandwidth measurement), then samples
// the counters every sample_interval_s until destroyed. snapshot() is safe from any thread.
class TopologyMonitor {
 public:
  explicit TopologyMonitor(TopologyOptions options);
  ~TopologyMonitor();
  TopologyMonitor(const TopologyMonitor&) = delete;
  TopologyMonitor& operator=(const TopologyMonitor&) = delete;

  // Called on the monitor's thread after discovery and after every sample (e.g. to update metrics). Set it
  // before start().
  void set_on_sample(std::function<void(const Topology&)> callback) { on_sample_ = std::move(callback); }
  void start();
  Topology snapshot() const;
  // Runs discovery and one sample on the calling thread (tests; `mmserve` uses start()).
  void run_once();
  bool discovered() const { return discovered_.load(); }

 private:
  void discover();
  void sample(double interval_s);
  void loop();

  TopologyOptions options_;
  std::function<void(const Topology&)> on_sample_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  Topology current_;
  std::vector<IbPortCounters> ib_previous_;
  bool ib_have_previous_ = false;
  std::atomic<bool> discovered_{false};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mmserve
