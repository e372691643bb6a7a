// Topology on a real GPU (skipped, with the reason, without one): every GPU CUDA sees is found, the P2P matrix
// is n x n with a true diagonal, and the measured device-local copy bandwidth is positive. NVML's data is
// checked where the driver's libnvidia-ml is present. Prints the snapshot for the log.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/cuda/topology.h"
#include "kernels/testing/cuda_test_util.h"

namespace mmserve {
namespace {

TEST(TopologyGpu, FindsTheGpusP2pAndALocalBandwidth) {
  MMSERVE_REQUIRE_GPU();
  int count = 0;
  ASSERT_CUDA_OK(cudaGetDeviceCount(&count));
  TopologyOptions options;
  options.ib_sysfs_root = "/nonexistent/mmserve/infiniband";
  options.bandwidth_bytes = 256ull << 20;
  TopologyMonitor monitor(options);
  monitor.run_once();
  const Topology t = monitor.snapshot();
  ASSERT_EQ(static_cast<int>(t.gpus.size()), count) << t.gpus_reason;
  ASSERT_EQ(static_cast<int>(t.p2p.size()), count) << t.p2p_reason;
  for (int i = 0; i < count; ++i) {
    EXPECT_EQ(static_cast<int>(t.p2p[i].size()), count);
    EXPECT_TRUE(t.p2p[i][i]);
  }
  ASSERT_EQ(static_cast<int>(t.bandwidth_gbps.size()), count) << t.bandwidth_reason;
  for (int i = 0; i < count; ++i) {
    EXPECT_GT(t.bandwidth_gbps[i][i], 0.0) << "GPU " << i;
    std::printf("topology: GPU %d %s %s %.1f GiB, device-local copy %.1f GB/s, %zu NVLink links\n", i,
                t.gpus[i].name.c_str(), t.gpus[i].pci_bus_id.c_str(),
                t.gpus[i].memory_total_bytes / (1024.0 * 1024 * 1024), t.bandwidth_gbps[i][i],
                t.gpus[i].nvlinks.size());
    EXPECT_FALSE(t.gpus[i].pci_bus_id.empty());
    EXPECT_GT(t.gpus[i].memory_total_bytes, 0u);
  }
  for (const std::string& e : t.errors) ADD_FAILURE() << e;
  if (t.nvml_reason.empty()) {
    for (const GpuInfo& gpu : t.gpus) EXPECT_FALSE(gpu.name.empty());
  } else {
    std::printf("topology: NVML absent here: %s\n", t.nvml_reason.c_str());
  }
}

}  // namespace
}  // namespace mmserve
