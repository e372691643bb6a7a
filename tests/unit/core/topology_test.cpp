// Topology telemetry without a GPU: the document's calc_ib_bandwidth (goldens from the document's own Python
// function, run as written), the InfiniBand sysfs reader on fake trees (4-byte units, absent files, garbage,
// counters that go backwards or saturate), PCI bus id normalisation, NVML absent, and the monitor end to end on
// a fake tree. The GPU path is in topology_gpu_test.cpp.
#include "core/cuda/topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace mmserve {
namespace {

namespace fs = std::filesystem;

const char* kNoNvml = "libmmserve-test-no-such-nvml.so.1";

// A fake /sys/class/infiniband under a temporary directory, removed at scope exit.
class FakeSysfs {
 public:
  FakeSysfs() {
    root_ = fs::temp_directory_path() / ("mmserve_ib_" + std::to_string(::getpid()) + "_" + std::to_string(n_++));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  // Writes <root>/<device>/ports/<port>/counters/<name>.
  void write(const std::string& device, int port, const std::string& name, const std::string& text) {
    const fs::path dir = root_ / device / "ports" / std::to_string(port) / "counters";
    fs::create_directories(dir);
    std::ofstream(dir / name) << text;
  }
  void counters(const std::string& device, int port, uint64_t xmit_words, uint64_t rcv_words) {
    write(device, port, "port_xmit_data", std::to_string(xmit_words) + "\n");
    write(device, port, "port_rcv_data", std::to_string(rcv_words) + "\n");
  }
  std::string root() const { return root_.string(); }

 private:
  static inline int n_ = 0;
  fs::path root_;
};

const IbPortCounters* find_port(const std::vector<IbPortCounters>& ports, const std::string& device, int port) {
  for (const IbPortCounters& p : ports) {
    if (p.device == device && p.port == port) return &p;
  }
  return nullptr;
}

TEST(CalcIbBandwidth, MatchesTheDocumentsFunction) {
  // Goldens: the document's calc_ib_bandwidth (SPEC 2.1 source, section 2.1) run in Python 3 as written.
  EXPECT_DOUBLE_EQ(calc_ib_bandwidth(3.0 * 1024 * 1024 * 1024, 1024.0 * 1024 * 1024, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(calc_ib_bandwidth(123456789.0, 987654321.0, 0.5), 1.0348028596490622);
  EXPECT_DOUBLE_EQ(calc_ib_bandwidth(0.0, 0.0, 5.0), 0.0);
  EXPECT_DOUBLE_EQ(calc_ib_bandwidth(4.0 * 1000, 4.0 * 3000, 1.5), 4.967053731282552e-06);
}

TEST(PciBusId, NormalisesNvmlCudaAndShortForms) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:1B:00.0"), "0000:1b:00.0");  // NVML
  EXPECT_EQ(normalize_pci_bus_id("0000:1b:00.0"), "0000:1b:00.0");      // CUDA
  EXPECT_EQ(normalize_pci_bus_id("1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0001:C1:1F.7"), "0001:c1:1f.7");
  EXPECT_EQ(normalize_pci_bus_id(""), "");
  EXPECT_EQ(normalize_pci_bus_id("garbage"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:1b:00.0x"), "");
  EXPECT_EQ(normalize_pci_bus_id("0000:1b:40.0"), "");  // device > 0x1f
}

TEST(IbSysfs, ReadsEveryPortInFourByteUnits) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 1000, 2000);
  sys.counters("mlx5_0", 2, 0, 7);
  sys.counters("mlx5_1", 1, 123456789012ull, 5);
  StatusOr<std::vector<IbPortCounters>> ports = read_ib_counters(sys.root());
  ASSERT_TRUE(ports.ok()) << ports.status().to_string();
  ASSERT_EQ(ports->size(), 3u);
  const IbPortCounters* p = find_port(*ports, "mlx5_0", 1);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->error.empty()) << p->error;
  EXPECT_EQ(p->xmit_bytes, 4000u);  // PortXmitData counts 4-octet words
  EXPECT_EQ(p->rcv_bytes, 8000u);
  p = find_port(*ports, "mlx5_1", 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->xmit_bytes, 123456789012ull * 4);
  EXPECT_EQ(p->rcv_bytes, 20u);
}

TEST(IbSysfs, RatesUseTheDocumentsFormulaOnTheDeltas) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 1000, 2000);
  StatusOr<std::vector<IbPortCounters>> before = read_ib_counters(sys.root());
  ASSERT_TRUE(before.ok());
  // 256 Mi words out (1 GiB), 768 Mi words in (3 GiB) over 2 s: ((1 + 3) / 2) / 2 = 1 GB/s.
  sys.counters("mlx5_0", 1, 1000 + (256ull << 20), 2000 + (768ull << 20));
  StatusOr<std::vector<IbPortCounters>> after = read_ib_counters(sys.root());
  ASSERT_TRUE(after.ok());
  StatusOr<std::vector<IbPortRate>> rates = ib_port_rates(*before, *after, 2.0);
  ASSERT_TRUE(rates.ok()) << rates.status().to_string();
  ASSERT_EQ(rates->size(), 1u);
  EXPECT_TRUE((*rates)[0].error.empty()) << (*rates)[0].error;
  EXPECT_DOUBLE_EQ((*rates)[0].xmit_bytes, 1024.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ((*rates)[0].rcv_bytes, 3.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ((*rates)[0].gbps, 1.0);
  EXPECT_DOUBLE_EQ((*rates)[0].gbps, calc_ib_bandwidth((*rates)[0].xmit_bytes, (*rates)[0].rcv_bytes, 2.0));
}

TEST(IbSysfs, AbsentFileAndGarbageAreErrorsOfThatPortOnly) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 10, 20);
  sys.write("mlx5_0", 2, "port_xmit_data", "10\n");  // port_rcv_data absent
  sys.write("mlx5_1", 1, "port_xmit_data", "12abc\n");
  sys.write("mlx5_1", 1, "port_rcv_data", "5\n");
  sys.write("mlx5_2", 1, "port_xmit_data", "-3\n");
  sys.write("mlx5_2", 1, "port_rcv_data", "5\n");
  sys.write("mlx5_3", 1, "port_xmit_data", "99999999999999999999999\n");  // > 2^64
  sys.write("mlx5_3", 1, "port_rcv_data", "\n");
  StatusOr<std::vector<IbPortCounters>> ports = read_ib_counters(sys.root());
  ASSERT_TRUE(ports.ok());
  ASSERT_EQ(ports->size(), 5u);
  EXPECT_TRUE(find_port(*ports, "mlx5_0", 1)->error.empty());
  const std::string missing = find_port(*ports, "mlx5_0", 2)->error;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
  EXPECT_NE(missing.find("port_rcv_data"), std::string::npos) << missing;
  for (const char* device : {"mlx5_1", "mlx5_2", "mlx5_3"}) {
    const std::string garbage = find_port(*ports, device, 1)->error;
    EXPECT_NE(garbage.find("not a counter value"), std::string::npos) << device << ": " << garbage;
  }
  // A broken port has no rate, and says why; the good one still has one.
  StatusOr<std::vector<IbPortRate>> rates = ib_port_rates(*ports, *ports, 1.0);
  ASSERT_TRUE(rates.ok());
  for (const IbPortRate& r : *rates) {
    if (r.device == "mlx5_0" && r.port == 1) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      EXPECT_EQ(r.gbps, 0.0);
    } else {
      EXPECT_FALSE(r.error.empty()) << r.device;
    }
  }
}

TEST(IbSysfs, DeviceWithoutPortsIsReported) {
  FakeSysfs sys;
  fs::create_directories(fs::path(sys.root()) / "mlx5_9");
  StatusOr<std::vector<IbPortCounters>> ports = read_ib_counters(sys.root());
  ASSERT_TRUE(ports.ok());
  ASSERT_EQ(ports->size(), 1u);
  EXPECT_NE((*ports)[0].error.find("no ports"), std::string::npos) << (*ports)[0].error;
}

TEST(IbSysfs, BackwardsAndSaturatedCountersGiveNoRate) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 5000, 5000);
  sys.counters("mlx5_0", 2, 100, 100);
  StatusOr<std::vector<IbPortCounters>> before = read_ib_counters(sys.root());
  ASSERT_TRUE(before.ok());
  sys.counters("mlx5_0", 1, 10, 6000);            // reset or wrapped
  sys.counters("mlx5_0", 2, 0xffffffffull, 200);  // a 32-bit counter stuck at its maximum
  sys.counters("mlx5_1", 1, 1, 1);                // new since the first sample
  StatusOr<std::vector<IbPortCounters>> after = read_ib_counters(sys.root());
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(find_port(*after, "mlx5_0", 2)->saturated);
  StatusOr<std::vector<IbPortRate>> rates = ib_port_rates(*before, *after, 1.0);
  ASSERT_TRUE(rates.ok());
  ASSERT_EQ(rates->size(), 3u);
  for (const IbPortRate& r : *rates) {
    EXPECT_EQ(r.gbps, 0.0);
    std::string expected = "no earlier sample";  // mlx5_1
    if (r.device == "mlx5_0") expected = r.port == 1 ? "went backwards" : "saturated";
    EXPECT_NE(r.error.find(expected), std::string::npos) << r.device << " " << r.port << ": " << r.error;
  }
}

TEST(IbSysfs, RootAbsentIsNoInfinibandAndBadIntervalIsRefused) {
  StatusOr<std::vector<IbPortCounters>> none = read_ib_counters("/nonexistent/mmserve/infiniband");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  FakeSysfs sys;
  const std::string file = sys.root() + "/not-a-dir";
  std::ofstream(file) << "x";
  StatusOr<std::vector<IbPortCounters>> bad = read_ib_counters(file);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ib_port_rates({}, {}, 0.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ib_port_rates({}, {}, -1.0).status().code(), StatusCode::kInvalidArgument);
}

TEST(Nvml, AbsentLibraryIsAReasonNotAFailure) {
  Topology t;
  discover_nvml(t, kNoNvml);
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_NE(t.nvml_reason.find("NVML not available"), std::string::npos) << t.nvml_reason;
  EXPECT_NE(t.nvml_reason.find(kNoNvml), std::string::npos) << t.nvml_reason;
  EXPECT_NE(t.gpus_reason.find("NVML not available"), std::string::npos) << t.gpus_reason;
  sample_nvlink_counters(t, nullptr, 1.0, kNoNvml);  // a no-op, never a crash
  EXPECT_TRUE(t.gpus.empty());
}

TEST(TopologyMonitor, RunsOnAFakeTreeWithoutNvml) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 10, 20);
  TopologyOptions options;
  options.nvml_library = kNoNvml;
  options.ib_sysfs_root = sys.root();
  options.bandwidth_bytes = 0;
  TopologyMonitor monitor(options);
  EXPECT_FALSE(monitor.discovered());
  int callbacks = 0;
  monitor.set_on_sample([&](const Topology&) { ++callbacks; });
  monitor.run_once();
  EXPECT_TRUE(monitor.discovered());
  EXPECT_EQ(callbacks, 1);
  const Topology t = monitor.snapshot();
  EXPECT_NE(t.nvml_reason.find("NVML not available"), std::string::npos);
  if (t.gpus.empty()) {
    EXPECT_FALSE(t.gpus_reason.empty());
  }
  EXPECT_NE(t.bandwidth_reason.find("skipped"), std::string::npos) << t.bandwidth_reason;
  ASSERT_EQ(t.ib_ports.size(), 1u);
  EXPECT_NE(t.ib_ports[0].error.find("first sample"), std::string::npos) << t.ib_ports[0].error;
}

TEST(TopologyMonitor, ThreadSamplesAndStops) {
  FakeSysfs sys;
  sys.counters("mlx5_0", 1, 10, 20);
  TopologyOptions options;
  options.nvml_library = kNoNvml;
  options.ib_sysfs_root = sys.root();
  options.bandwidth_bytes = 0;
  options.sample_interval_s = 0.1;
  std::atomic<int> samples{0};
  {
    TopologyMonitor monitor(options);
    monitor.set_on_sample([&](const Topology&) { ++samples; });
    monitor.start();
    for (int i = 0; i < 100 && samples.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const Topology t = monitor.snapshot();
    ASSERT_EQ(t.ib_ports.size(), 1u);
    if (samples.load() >= 2) {
      EXPECT_TRUE(t.ib_ports[0].error.empty()) << t.ib_ports[0].error;  // counters unchanged: a rate of 0
      EXPECT_EQ(t.ib_ports[0].gbps, 0.0);
    }
  }  // the destructor stops the thread
  EXPECT_GE(samples.load(), 2);
}

}  // namespace
}  // namespace mmserve
