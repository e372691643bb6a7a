// The document's IB formula, the InfiniBand sysfs reader and the TopologyMonitor (see topology.h). NVML lives in
// topology_nvml.cpp, the CUDA matrices in topology_cuda.cpp.
// Tests: tests/unit/core/topology_test.cpp.
#include "core/cuda/topology.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace mmserve {
namespace {

namespace fs = std::filesystem;

// The IB spec's PortXmitData/PortRcvData count 4-octet words.
constexpr uint64_t kIbBytesPerCounterUnit = 4;
// A 32-bit PortCounters value saturates at this (the 64-bit extended counters never get there in practice).
constexpr uint64_t kIbCounter32Max = 0xffffffffull;

// One counter file: a decimal unsigned integer and a newline. Anything else is an error naming the file.
StatusOr<uint64_t> read_counter_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("missing " + path.string());
  std::ifstream in(path);
  if (!in) return internal_error("cannot read " + path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  size_t begin = 0;
  while (begin < text.size() && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  text = text.substr(begin);
  if (text.empty() || text.size() > 20 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return invalid_argument("not a counter value in " + path.string() + ": '" + text.substr(0, 40) + "'");
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE) return invalid_argument("counter value out of range in " + path.string());
  return static_cast<uint64_t>(value);
}

}  // namespace

double calc_ib_bandwidth(double tx_bytes, double rx_bytes, double interval_sec) {
  const double total_bytes = (tx_bytes + rx_bytes) / 2.0;            // both directions' mean
  return (total_bytes / interval_sec) / (1024.0 * 1024.0 * 1024.0);  // GB/s, GB = 1024^3
}

std::string normalize_pci_bus_id(const std::string& bus_id) {
  // Only hex digits and separators (sscanf's %x would also take a "0x" prefix and signs).
  if (bus_id.empty() || bus_id.size() > 20 || !std::all_of(bus_id.begin(), bus_id.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
      })) {
    return "";
  }
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  // With the domain (NVML: 8 hex digits, CUDA: 4), then without it.
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4) {
    domain = 0;
    if (std::sscanf(bus_id.c_str(), "%x:%x.%x%c", &bus, &device, &function, &tail) != 3) return "";
  }
  if (bus > 0xff || device > 0x1f || function > 0x7 || domain > 0xffff) return "";
  char out[32];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain, bus, device, function);
  return out;
}

StatusOr<std::vector<IbPortCounters>> read_ib_counters(const std::string& sysfs_root) {
  std::vector<IbPortCounters> out;
  std::error_code ec;
  const fs::path root(sysfs_root);
  if (!fs::exists(root, ec)) return out;
  if (!fs::is_directory(root, ec)) return invalid_argument("InfiniBand sysfs root is not a directory: " + sysfs_root);
  std::vector<fs::path> devices;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) devices.push_back(entry.path());
  std::sort(devices.begin(), devices.end());
  for (const fs::path& device : devices) {
    const fs::path ports = device / "ports";
    std::vector<int> port_numbers;
    bool bad_port_dir = false;
    if (fs::is_directory(ports, ec)) {
      for (const fs::directory_entry& entry : fs::directory_iterator(ports, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.empty() && name.size() < 6 &&
            std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          port_numbers.push_back(std::stoi(name));
        } else {
          bad_port_dir = true;
        }
      }
    }
    std::sort(port_numbers.begin(), port_numbers.end());
    if (port_numbers.empty()) {
      IbPortCounters none;
      none.device = device.filename().string();
      none.error =
          bad_port_dir ? "no numbered port directories under " + ports.string() : "no ports under " + ports.string();
      out.push_back(std::move(none));
      continue;
    }
    for (int port : port_numbers) {
      IbPortCounters counters;
      counters.device = device.filename().string();
      counters.port = port;
      const fs::path dir = ports / std::to_string(port) / "counters";
      StatusOr<uint64_t> xmit = read_counter_file(dir / "port_xmit_data");
      StatusOr<uint64_t> rcv = read_counter_file(dir / "port_rcv_data");
      if (!xmit.ok() || !rcv.ok()) {
        counters.error = !xmit.ok() ? xmit.status().message() : rcv.status().message();
      } else if (*xmit > UINT64_MAX / kIbBytesPerCounterUnit || *rcv > UINT64_MAX / kIbBytesPerCounterUnit) {
        counters.error = "counter value too large to convert to bytes under " + dir.string();
      } else {
        counters.saturated = *xmit == kIbCounter32Max || *rcv == kIbCounter32Max;
        counters.xmit_bytes = *xmit * kIbBytesPerCounterUnit;
        counters.rcv_bytes = *rcv * kIbBytesPerCounterUnit;
      }
      out.push_back(std::move(counters));
    }
  }
  return out;
}

StatusOr<std::vector<IbPortRate>> ib_port_rates(const std::vector<IbPortCounters>& before,
                                                const std::vector<IbPortCounters>& after, double interval_sec) {
  if (!(interval_sec > 0.0)) return invalid_argument("IB sampling interval must be > 0 seconds");
  std::map<std::pair<std::string, int>, const IbPortCounters*> earlier;
  for (const IbPortCounters& c : before) earlier[{c.device, c.port}] = &c;
  std::vector<IbPortRate> out;
  for (const IbPortCounters& now : after) {
    IbPortRate rate;
    rate.device = now.device;
    rate.port = now.port;
    const auto found = earlier.find({now.device, now.port});
    if (!now.error.empty()) {
      rate.error = now.error;
    } else if (found == earlier.end() || !found->second->error.empty()) {
      rate.error = "no earlier sample of this port";
    } else if (now.saturated) {
      rate.error =
          "counter saturated at 0xffffffff (32-bit PortCounters): reset it or use a kernel with the "
          "extended 64-bit counters";
    } else if (now.xmit_bytes < found->second->xmit_bytes || now.rcv_bytes < found->second->rcv_bytes) {
      rate.error = "counter went backwards (reset or wrapped) during the interval";
    } else {
      rate.xmit_bytes = static_cast<double>(now.xmit_bytes - found->second->xmit_bytes);
      rate.rcv_bytes = static_cast<double>(now.rcv_bytes - found->second->rcv_bytes);
      rate.gbps = calc_ib_bandwidth(rate.xmit_bytes, rate.rcv_bytes, interval_sec);
    }
    out.push_back(std::move(rate));
  }
  return out;
}

// ---- TopologyMonitor ----

TopologyMonitor::TopologyMonitor(TopologyOptions options) : options_(std::move(options)) {
  current_.gpus_reason = "topology discovery has not finished yet";
  current_.sample_interval_s = options_.sample_interval_s;
}

TopologyMonitor::~TopologyMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TopologyMonitor::start() {
  thread_ = std::thread([this] { loop(); });
}

Topology TopologyMonitor::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

void TopologyMonitor::discover() {
  Topology t;
  t.sample_interval_s = options_.sample_interval_s;
  discover_cuda(t);
  discover_nvml(t, options_.nvml_library);
  if (t.gpus.empty() && t.gpus_reason.empty()) t.gpus_reason = "no GPU found";
  measure_copy_bandwidth(t, options_.bandwidth_bytes);
  t.ib_reason = "first sample pending";
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = std::move(t);
  }
  discovered_ = true;
}

void TopologyMonitor::sample(double interval_s) {
  Topology t = snapshot();
  const Topology previous = t;
  sample_nvlink_counters(t, interval_s > 0 ? &previous : nullptr, interval_s, options_.nvml_library);
  StatusOr<std::vector<IbPortCounters>> counters = read_ib_counters(options_.ib_sysfs_root);
  t.ib_reason.clear();
  if (!counters.ok()) {
    t.ib_ports.clear();
    t.ib_reason = counters.status().message();
  } else if (counters->empty()) {
    t.ib_ports.clear();
    t.ib_reason = "no InfiniBand devices under " + options_.ib_sysfs_root;
  } else if (!ib_have_previous_ || !(interval_s > 0)) {
    t.ib_ports.clear();
    for (const IbPortCounters& c : *counters) {
      IbPortRate rate;
      rate.device = c.device;
      rate.port = c.port;
      rate.error = c.error.empty() ? "first sample: a rate needs two" : c.error;
      t.ib_ports.push_back(std::move(rate));
    }
  } else {
    StatusOr<std::vector<IbPortRate>> rates = ib_port_rates(ib_previous_, *counters, interval_s);
    if (rates.ok()) {
      t.ib_ports = std::move(*rates);
    } else {
      t.ib_reason = rates.status().message();
    }
  }
  if (counters.ok()) {
    ib_previous_ = std::move(*counters);
    ib_have_previous_ = true;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  current_ = std::move(t);
}

void TopologyMonitor::run_once() {
  discover();
  sample(0.0);
  if (on_sample_) on_sample_(snapshot());
}

void TopologyMonitor::loop() {
  discover();
  sample(0.0);
  if (on_sample_) on_sample_(snapshot());
  auto last = std::chrono::steady_clock::now();
  const auto period = std::chrono::duration<double>(std::max(0.1, options_.sample_interval_s));
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, period, [this] { return stop_; })) return;
    }
    const auto now = std::chrono::steady_clock::now();
    sample(std::chrono::duration<double>(now - last).count());  // the measured interval, not the nominal one
    last = now;
    if (on_sample_) on_sample_(snapshot());
  }
}

}  // namespace mmserve
