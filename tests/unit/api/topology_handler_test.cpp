// GET /v2/debug/topology over real HTTP (a TopologyMonitor on a fake InfiniBand tree, NVML absent: the shape this
// GPU-less machine gives), the same route with telemetry off, and the topology gauges in GET /metrics.
#include "api/topology_handler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serving/serving_metrics.h"
#include "test_server.h"

namespace mmserve::api::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

void expect_shape(const json& body) {
  for (const char* key : {"gpus", "links", "p2p", "bandwidth_gbps", "ib_ports", "errors"}) {
    EXPECT_TRUE(body.contains(key) && body[key].is_array()) << key << ": " << body.dump();
  }
  EXPECT_TRUE(body["reasons"].is_object()) << body.dump();
  EXPECT_TRUE(body["discovered"].is_boolean());
  EXPECT_TRUE(body["bandwidth_bytes"].is_number());
  EXPECT_TRUE(body["units"].is_object());
}

TEST(DebugTopology, ShapeWithoutGpuOrNvml) {
  const fs::path root = fs::temp_directory_path() / ("mmserve_topo_api_" + std::to_string(::getpid()));
  fs::create_directories(root / "mlx5_0" / "ports" / "1" / "counters");
  std::ofstream(root / "mlx5_0" / "ports" / "1" / "counters" / "port_xmit_data") << "100\n";
  std::ofstream(root / "mlx5_0" / "ports" / "1" / "counters" / "port_rcv_data") << "200\n";
  TopologyOptions options;
  options.nvml_library = "libmmserve-test-no-such-nvml.so.1";
  options.ib_sysfs_root = root.string();
  options.bandwidth_bytes = 0;
  TopologyMonitor monitor(options);
  monitor.run_once();
  HttpServerOptions http;
  http.topology = &monitor;
  TestServer s(http);
  httplib::Client c = s.client();
  const httplib::Result r = c.Get("/v2/debug/topology");
  fs::remove_all(root);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  expect_shape(body);
  EXPECT_TRUE(body["discovered"].get<bool>());
  EXPECT_NE(body["reasons"]["nvml"].get<std::string>().find("NVML not available"), std::string::npos) << r->body;
  if (body["gpus"].empty()) {  // this machine: no GPU, so the reason says why
    EXPECT_FALSE(body["reasons"]["gpus"].get<std::string>().empty()) << r->body;
    EXPECT_TRUE(body["p2p"].empty());
    EXPECT_FALSE(body["reasons"]["p2p"].get<std::string>().empty()) << r->body;
  }
  EXPECT_NE(body["reasons"]["bandwidth"].get<std::string>().find("skipped"), std::string::npos) << r->body;
  ASSERT_EQ(body["ib_ports"].size(), 1u) << r->body;
  EXPECT_EQ(body["ib_ports"][0]["device"], "mlx5_0");
  EXPECT_EQ(body["ib_ports"][0]["port"], 1);
  EXPECT_NE(body["ib_ports"][0]["error"].get<std::string>().find("first sample"), std::string::npos);
  // POST is not a route here.
  const httplib::Result post = c.Post("/v2/debug/topology", "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST(DebugTopology, OffSaysSo) {
  TestServer s;  // no monitor
  httplib::Client c = s.client();
  const httplib::Result r = c.Get("/v2/debug/topology");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  expect_shape(body);
  EXPECT_FALSE(body["discovered"].get<bool>());
  EXPECT_TRUE(body["gpus"].empty());
  EXPECT_NE(body["reasons"]["gpus"].get<std::string>().find("off"), std::string::npos) << r->body;
}

TEST(DebugTopology, EncodesLinksAndMatrices) {
  Topology t;
  GpuInfo g0;
  g0.index = 0;
  g0.name = "H200";
  g0.pci_bus_id = "0000:1b:00.0";
  NvLinkInfo link;
  link.link = 3;
  link.active = true;
  link.version = 4;
  link.remote_pci_bus_id = "0000:2c:00.0";
  link.remote_gpu = 1;
  g0.nvlinks.push_back(link);
  t.gpus.push_back(g0);
  t.p2p = {{true, false}, {false, true}};
  t.bandwidth_gbps = {{1500.0, 20.5}, {21.0, 1490.0}};
  const json body = json::parse(encode_topology(t, true));
  expect_shape(body);
  ASSERT_EQ(body["links"].size(), 1u);
  EXPECT_EQ(body["links"][0]["gpu"], 0);
  EXPECT_EQ(body["links"][0]["link"], 3);
  EXPECT_EQ(body["links"][0]["remote_gpu"], 1);
  EXPECT_EQ(body["links"][0]["version"], 4);
  EXPECT_EQ(body["p2p"], json::parse("[[true,false],[false,true]]"));
  EXPECT_EQ(body["bandwidth_gbps"][0][1], 20.5);
}

TEST(TopologyMetricsTest, PublishesEveryFamily) {
  TestServer s;
  serving::TopologyMetrics metrics(s.fake.metrics());
  Topology t;
  GpuInfo g0;
  g0.index = 0;
  NvLinkInfo up;
  up.link = 0;
  up.active = true;
  up.counters_valid = true;
  up.tx_gbps = 2.5;
  up.rx_gbps = 1.25;
  NvLinkInfo down;
  down.link = 1;
  g0.nvlinks = {up, down};
  t.gpus.push_back(g0);
  t.p2p = {{true}};
  t.bandwidth_gbps = {{1234.5}};
  IbPortRate ib;
  ib.device = "mlx5_0";
  ib.port = 1;
  ib.gbps = 0.75;
  IbPortRate broken;
  broken.device = "mlx5_1";
  broken.port = 1;
  broken.error = "missing port_rcv_data";
  t.ib_ports = {ib, broken};
  metrics.publish(t);
  httplib::Client c = s.client();
  const httplib::Result r = c.Get("/metrics");
  ASSERT_TRUE(r);
  const std::string& text = r->body;
  for (const char* line : {
           "mmserve_gpus 1\n",
           "mmserve_nvlink_active{gpu=\"0\",link=\"0\"} 1\n",
           "mmserve_nvlink_active{gpu=\"0\",link=\"1\"} 0\n",
           "mmserve_nvlink_throughput_gigabytes_per_second{gpu=\"0\",link=\"0\",direction=\"tx\"} 2.5\n",
           "mmserve_nvlink_throughput_gigabytes_per_second{gpu=\"0\",link=\"0\",direction=\"rx\"} 1.25\n",
           "mmserve_gpu_p2p_access{src=\"0\",dst=\"0\"} 1\n",
           "mmserve_gpu_copy_bandwidth_gigabytes_per_second{src=\"0\",dst=\"0\"} 1234.5\n",
           "mmserve_ib_port_bandwidth_gigabytes_per_second{device=\"mlx5_0\",port=\"1\"} 0.75\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(text.find("device=\"mlx5_1\""), std::string::npos) << "a broken port has no value";
  EXPECT_EQ(text.find("link=\"1\",direction"), std::string::npos) << "a link without counters has no rate";
}

}  // namespace
}  // namespace mmserve::api::testing
