// GET /v2/debug/topology (issue 6, SPEC 2.1): the TopologyMonitor's latest snapshot as JSON.
//
//   {"discovered": bool, "gpus": [{index, name, pci_bus_id, memory_total_bytes, nvlink_reason}],
//    "links": [{gpu, link, active, version, remote_pci_bus_id, remote_gpu, counters_valid, tx_bytes, rx_bytes,
//               tx_gbps, rx_gbps}],
//    "p2p": [[bool]], "bandwidth_gbps": [[number]], "bandwidth_bytes": N,
//    "ib_ports": [{device, port, gbps, xmit_bytes, rcv_bytes, error}], "sample_interval_s": s,
//    "reasons": {"gpus"|"nvml"|"p2p"|"bandwidth"|"ib": "why that part is empty"}, "errors": [string],
//    "units": {...}}
// Every key is always present (empty arrays with a reason where a source is missing), so clients need no
// special cases for CPU-only machines. GB/s are 1024^3 bytes per second (the document's convention).
// Tests: tests/unit/api/topology_handler_test.cpp.
#pragma once

#include <string>

#include "api/handlers.h"
#include "core/cuda/topology.h"

namespace mmserve::api {

std::string encode_topology(const Topology& topology, bool discovered);

// `monitor` may be null (telemetry off): the same shape, empty, with the reason.
Reply handle_debug_topology(const TopologyMonitor* monitor);

}  // namespace mmserve::api
