// GET /v2/debug/topology (see topology_handler.h). Tests: tests/unit/api/topology_handler_test.cpp.
#include "api/topology_handler.h"

#include <nlohmann/json.hpp>

namespace mmserve::api {

using nlohmann::json;

std::string encode_topology(const Topology& t, bool discovered) {
  json gpus = json::array();
  json links = json::array();
  for (const GpuInfo& gpu : t.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"name", gpu.name},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"memory_total_bytes", gpu.memory_total_bytes},
                    {"nvlink_count", gpu.nvlinks.size()},
                    {"nvlink_reason", gpu.nvlink_reason}});
    for (const NvLinkInfo& link : gpu.nvlinks) {
      links.push_back({{"gpu", gpu.index},
                       {"link", link.link},
                       {"active", link.active},
                       {"version", link.version},
                       {"remote_pci_bus_id", link.remote_pci_bus_id},
                       {"remote_gpu", link.remote_gpu},
                       {"counters_valid", link.counters_valid},
                       {"tx_bytes", link.tx_bytes},
                       {"rx_bytes", link.rx_bytes},
                       {"tx_gbps", link.tx_gbps},
                       {"rx_gbps", link.rx_gbps}});
    }
  }
  json p2p = json::array();
  for (const std::vector<bool>& row : t.p2p) p2p.push_back(json(row));
  json bandwidth = json::array();
  for (const std::vector<double>& row : t.bandwidth_gbps) bandwidth.push_back(json(row));
  json ib = json::array();
  for (const IbPortRate& port : t.ib_ports) {
    ib.push_back({{"device", port.device},
                  {"port", port.port},
                  {"gbps", port.gbps},
                  {"xmit_bytes", port.xmit_bytes},
                  {"rcv_bytes", port.rcv_bytes},
                  {"error", port.error}});
  }
  json reasons = json::object();
  auto reason = [&](const char* key, const std::string& why) {
    if (!why.empty()) reasons[key] = why;
  };
  reason("gpus", t.gpus_reason);
  reason("nvml", t.nvml_reason);
  reason("p2p", t.p2p_reason);
  reason("bandwidth", t.bandwidth_reason);
  reason("ib", t.ib_reason);
  const json out = {
      {"discovered", discovered},
      {"gpus", gpus},
      {"links", links},
      {"p2p", p2p},
      {"bandwidth_gbps", bandwidth},
      {"bandwidth_bytes", t.bandwidth_bytes},
      {"ib_ports", ib},
      {"sample_interval_s", t.sample_interval_s},
      {"reasons", reasons},
      {"errors", t.errors},
      {"units",
       {{"gbps", "GB/s, GB = 1024^3 bytes"},
        {"ib_gbps",
         "calc_ib_bandwidth(tx, rx, interval) = ((tx + rx) / 2) / interval / 1024^3 over the last "
         "sampling interval; sysfs counters are 4-byte units, converted to bytes"},
        {"nvlink", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (KiB counters), per link"}}},
  };
  return out.dump();
}

Reply handle_debug_topology(const TopologyMonitor* monitor) {
  if (monitor == nullptr) {
    Topology off;
    off.gpus_reason = "topology telemetry is off (MMSERVE_TOPOLOGY=0)";
    return Reply{200, encode_topology(off, false)};
  }
  return Reply{200, encode_topology(monitor->snapshot(), monitor->discovered())};
}

}  // namespace mmserve::api
