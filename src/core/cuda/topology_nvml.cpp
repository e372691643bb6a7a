// NVML, loaded at run time (see topology.h): GPUs, NVLink links and their data counters.
//
// The library is dlopen'ed (never linked) so the binary starts on machines without the driver. The few NVML
// types used are mirrored below rather than taken from nvml.h because this repository's build machines carry
// the CUDA toolkit without cuda-nvml-dev; where nvml.h is present, static_asserts check that the mirror has
// the same layout. NVML is initialised once per library name and never shut down (it is reference-counted and
// the process uses it until exit). Tests: tests/unit/core/topology_test.cpp (NVML absent),
// tests/unit/core/topology_gpu_test.cpp.
#include <dlfcn.h>

#include <cstddef>
#include <map>
#include <mutex>

#include "core/cuda/topology.h"

#if __has_include(<nvml.h>)
#include <nvml.h>
#define MMSERVE_HAVE_NVML_H 1
#endif

namespace mmserve {
namespace {

// ---- The NVML ABI subset (nvml.h, NVML API version 11/12) ----
using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlDevice = struct NvmlDeviceOpaque*;  // nvmlDevice_t

struct NvmlPciInfo {  // nvmlPciInfo_t (v3)
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
union NvmlValue {  // nvmlValue_t
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  signed long long sll;
  signed int si;
  unsigned short us;
};
struct NvmlFieldValue {  // nvmlFieldValue_t
  unsigned int field_id;
  unsigned int scope_id;
  long long timestamp;
  long long latency_usec;
  int value_type;  // nvmlValueType_t
  NvmlReturn nvml_return;
  NvmlValue value;
};
constexpr unsigned kNvmlFieldNvLinkDataTx = 138;  // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: KiB, cumulative
constexpr unsigned kNvmlFieldNvLinkDataRx = 139;  // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
constexpr unsigned kNvmlNvLinkMaxLinks = 18;      // NVML_NVLINK_MAX_LINKS (Hopper: 18)
constexpr int kNvmlFeatureEnabled = 1;            // NVML_FEATURE_ENABLED

#ifdef MMSERVE_HAVE_NVML_H
static_assert(sizeof(NvmlPciInfo) == sizeof(nvmlPciInfo_t));
static_assert(sizeof(NvmlMemory) == sizeof(nvmlMemory_t));
static_assert(sizeof(NvmlFieldValue) == sizeof(nvmlFieldValue_t));
static_assert(offsetof(NvmlFieldValue, value) == offsetof(nvmlFieldValue_t, value));
static_assert(kNvmlFieldNvLinkDataTx == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX);
static_assert(kNvmlFieldNvLinkDataRx == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX);
#endif

struct Nvml {
  std::string error;  // set when the library or nvmlInit is unusable
  NvmlReturn (*init)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_count)(unsigned*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*pci_info)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*memory_info)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*nvlink_state)(NvmlDevice, unsigned, int*) = nullptr;
  NvmlReturn (*nvlink_version)(NvmlDevice, unsigned, unsigned*) = nullptr;
  NvmlReturn (*nvlink_remote_pci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  NvmlReturn (*field_values)(NvmlDevice, int, NvmlFieldValue*) = nullptr;

  std::string describe(const char* call, NvmlReturn r) const {
    return std::string(call) + ": " + (error_string ? error_string(r) : "error") + " (" + std::to_string(r) + ")";
  }
};

template <typename F>
bool bind(void* lib, const char* symbol, F& out, std::string& error) {
  out = reinterpret_cast<F>(dlsym(lib, symbol));
  if (out == nullptr && error.empty()) error = std::string("NVML symbol missing: ") + symbol;
  return out != nullptr;
}

// The loaded, initialised library for `path` (cached: dlopen and nvmlInit happen once per name).
const Nvml& nvml(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, Nvml> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find(path);
  if (found != loaded.end()) return found->second;
  Nvml& n = loaded[path];
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    n.error = "NVML not available: dlopen(" + path + ") failed: " + (why ? why : "unknown error") +
              " (no NVIDIA driver on this machine?)";
    return n;
  }
  bind(lib, "nvmlInit_v2", n.init, n.error);
  bind(lib, "nvmlErrorString", n.error_string, n.error);
  bind(lib, "nvmlDeviceGetCount_v2", n.device_count, n.error);
  bind(lib, "nvmlDeviceGetHandleByIndex_v2", n.handle_by_index, n.error);
  bind(lib, "nvmlDeviceGetName", n.name, n.error);
  bind(lib, "nvmlDeviceGetPciInfo_v3", n.pci_info, n.error);
  bind(lib, "nvmlDeviceGetMemoryInfo", n.memory_info, n.error);
  bind(lib, "nvmlDeviceGetNvLinkState", n.nvlink_state, n.error);
  bind(lib, "nvmlDeviceGetNvLinkVersion", n.nvlink_version, n.error);
  bind(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", n.nvlink_remote_pci, n.error);
  bind(lib, "nvmlDeviceGetFieldValues", n.field_values, n.error);
  if (!n.error.empty()) return n;
  if (const NvmlReturn r = n.init(); r != kNvmlSuccess) n.error = "NVML not usable: " + n.describe("nvmlInit_v2", r);
  return n;
}

struct NvmlGpu {
  NvmlDevice handle = nullptr;
  std::string pci;  // normalized
};

std::vector<NvmlGpu> nvml_gpus(const Nvml& n, std::string& error) {
  std::vector<NvmlGpu> out;
  unsigned count = 0;
  if (const NvmlReturn r = n.device_count(&count); r != kNvmlSuccess) {
    error = n.describe("nvmlDeviceGetCount_v2", r);
    return out;
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlGpu gpu;
    NvmlPciInfo pci{};
    if (NvmlReturn r = n.handle_by_index(i, &gpu.handle); r != kNvmlSuccess) {
      error = n.describe("nvmlDeviceGetHandleByIndex_v2", r);
      gpu.handle = nullptr;
    } else if (r = n.pci_info(gpu.handle, &pci); r == kNvmlSuccess) {
      gpu.pci = normalize_pci_bus_id(pci.bus_id);
    }
    out.push_back(gpu);
  }
  return out;
}

int gpu_by_pci(const Topology& t, const std::string& pci) {
  if (pci.empty()) return -1;
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    if (t.gpus[i].pci_bus_id == pci) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

void discover_nvml(Topology& t, const std::string& library) {
  const Nvml& n = nvml(library);
  if (!n.error.empty()) {
    t.nvml_reason = n.error;
    if (t.gpus.empty()) t.gpus_reason = t.gpus_reason.empty() ? n.error : t.gpus_reason + "; " + n.error;
    for (GpuInfo& gpu : t.gpus) gpu.nvlink_reason = n.error;
    return;
  }
  std::string error;
  const std::vector<NvmlGpu> devices = nvml_gpus(n, error);
  if (!error.empty()) t.errors.push_back(error);
  const bool from_cuda = !t.gpus.empty();  // CUDA's list is authoritative; NVML only adds to it
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].handle == nullptr) continue;
    int slot = gpu_by_pci(t, devices[i].pci);
    if (slot < 0) {
      if (from_cuda) continue;  // hidden from this process (CUDA_VISIBLE_DEVICES)
      GpuInfo gpu;
      gpu.index = static_cast<int>(i);
      gpu.pci_bus_id = devices[i].pci;
      t.gpus.push_back(gpu);
      slot = static_cast<int>(t.gpus.size() - 1);
    }
    GpuInfo& gpu = t.gpus[static_cast<size_t>(slot)];
    NvmlDevice h = devices[i].handle;
    char name[96] = {};
    if (n.name(h, name, sizeof(name)) == kNvmlSuccess && gpu.name.empty()) gpu.name = name;
    NvmlMemory memory{};
    if (n.memory_info(h, &memory) == kNvmlSuccess && gpu.memory_total_bytes == 0) {
      gpu.memory_total_bytes = memory.total;
    }
    gpu.nvlinks.clear();
    NvmlReturn last = kNvmlSuccess;
    for (unsigned link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      int state = 0;
      last = n.nvlink_state(h, link, &state);
      if (last != kNvmlSuccess) continue;  // no such link on this GPU
      NvLinkInfo info;
      info.link = static_cast<int>(link);
      info.active = state == kNvmlFeatureEnabled;
      unsigned version = 0;
      if (n.nvlink_version(h, link, &version) == kNvmlSuccess) info.version = static_cast<int>(version);
      NvmlPciInfo remote{};
      if (n.nvlink_remote_pci(h, link, &remote) == kNvmlSuccess) {
        info.remote_pci_bus_id = normalize_pci_bus_id(remote.bus_id);
      }
      gpu.nvlinks.push_back(info);
    }
    if (gpu.nvlinks.empty()) gpu.nvlink_reason = "no NVLink links: " + n.describe("nvmlDeviceGetNvLinkState", last);
  }
  for (GpuInfo& gpu : t.gpus) {
    for (NvLinkInfo& link : gpu.nvlinks) link.remote_gpu = gpu_by_pci(t, link.remote_pci_bus_id);
  }
  if (t.gpus.empty() && t.gpus_reason.empty()) t.gpus_reason = "NVML reports no GPU";
}

void sample_nvlink_counters(Topology& t, const Topology* previous, double interval_s, const std::string& library) {
  const Nvml& n = nvml(library);
  if (!n.error.empty()) return;  // discover_nvml recorded why
  std::string error;
  const std::vector<NvmlGpu> devices = nvml_gpus(n, error);
  for (size_t g = 0; g < t.gpus.size(); ++g) {
    GpuInfo& gpu = t.gpus[g];
    NvmlDevice h = nullptr;
    for (const NvmlGpu& d : devices) {
      if (!d.pci.empty() && d.pci == gpu.pci_bus_id) h = d.handle;
    }
    if (h == nullptr) continue;
    std::vector<NvmlFieldValue> fields;
    std::vector<size_t> link_of;
    for (size_t l = 0; l < gpu.nvlinks.size(); ++l) {
      if (!gpu.nvlinks[l].active) continue;
      for (unsigned id : {kNvmlFieldNvLinkDataTx, kNvmlFieldNvLinkDataRx}) {
        NvmlFieldValue f{};
        f.field_id = id;
        f.scope_id = static_cast<unsigned>(gpu.nvlinks[l].link);  // per link
        fields.push_back(f);
        link_of.push_back(l);
      }
    }
    if (fields.empty()) continue;
    if (const NvmlReturn r = n.field_values(h, static_cast<int>(fields.size()), fields.data()); r != kNvmlSuccess) {
      gpu.nvlink_reason = "NVLink counters: " + n.describe("nvmlDeviceGetFieldValues", r);
      continue;
    }
    for (size_t k = 0; k < fields.size(); ++k) {
      NvLinkInfo& link = gpu.nvlinks[link_of[k]];
      if (fields[k].nvml_return != kNvmlSuccess) {
        link.counters_valid = false;
        gpu.nvlink_reason = "NVLink counters: " + n.describe("field NVLINK_THROUGHPUT_DATA", fields[k].nvml_return);
        continue;
      }
      unsigned long long kib = 0;
      switch (fields[k].value_type) {
        case 1: kib = fields[k].value.ui; break;   // NVML_VALUE_TYPE_UNSIGNED_INT
        case 2: kib = fields[k].value.ul; break;   // UNSIGNED_LONG
        case 3: kib = fields[k].value.ull; break;  // UNSIGNED_LONG_LONG
        case 4: kib = static_cast<unsigned long long>(fields[k].value.sll); break;
        default: kib = static_cast<unsigned long long>(fields[k].value.d); break;
      }
      (fields[k].field_id == kNvmlFieldNvLinkDataTx ? link.tx_bytes : link.rx_bytes) = kib * 1024ull;
      link.counters_valid = true;
    }
    // Rates from the previous sample of the same link.
    const GpuInfo* before = previous != nullptr && g < previous->gpus.size() ? &previous->gpus[g] : nullptr;
    for (NvLinkInfo& link : gpu.nvlinks) {
      link.tx_gbps = link.rx_gbps = 0.0;
      if (before == nullptr || !(interval_s > 0) || !link.counters_valid) continue;
      for (const NvLinkInfo& old : before->nvlinks) {
        if (old.link != link.link || !old.counters_valid) continue;
        constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
        if (link.tx_bytes >= old.tx_bytes) link.tx_gbps = (link.tx_bytes - old.tx_bytes) / interval_s / kGiB;
        if (link.rx_bytes >= old.rx_bytes) link.rx_gbps = (link.rx_bytes - old.rx_bytes) / interval_s / kGiB;
      }
    }
  }
}

}  // namespace mmserve
