// detect_topology for the cuda backend: which host each rank is on and how each pair of GPUs
// is linked.
//
// Host identity = hostname + /proc/sys/kernel/random/boot_id (two containers on one machine
// share the boot id but may differ in hostname; two machines never share a boot id). Machines
// are numbered by first appearance in rank order, local ranks by rank order within a machine.
// Each rank classifies its own row of the link matrix (it can query its own GPU) and the rows
// are all-gathered:
//   same rank -> kSelf; different hosts -> kNetwork;
//   same host -> kNVLink when NVML (dlopen'ed libnvidia-ml.so.1, no link-time dependency)
//                reports an active NVLink whose remote end is the peer's PCI address, or
//                NVLink P2P between the two GPUs (the NVSwitch case, where each link's remote
//                end is a switch), else kPCIe.
//   Without NVML: kNVLink when CUDA says P2P access is supported and its performance rank is 0
//   (the best the driver reports; a heuristic that can call a PCIe P2P pair NVLink on
//   machines without NVLink), else kPCIe.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/comm/bootstrap.h"
#include "tessera/comm/topology.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera {

namespace {

// The few NVML declarations used here (nvml.h is not installed on every build machine; these
// are stable parts of the NVML ABI).
using nvmlReturn = int;
using nvmlDeviceHandle = struct nvmlDevice_st*;
constexpr nvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvmlNvLinkMaxLinks = 18;
constexpr int kNvmlNvLinkDeviceTypeSwitch = 2;
constexpr int kNvmlP2PCapsIndexNvLink = 2;
constexpr int kNvmlP2PStatusOk = 0;
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_sub_system_id;
  char bus_id[32];
};

struct PciAddress {
  unsigned int domain = 0, bus = 0, device = 0;
  bool valid = false;
  bool operator==(const PciAddress& o) const {
    return valid && o.valid && domain == o.domain && bus == o.bus && device == o.device;
  }
};

// "0000:18:00.0" or "00000000:18:00.0" (hex).
PciAddress parse_pci(const std::string& text) {
  PciAddress a;
  unsigned int function = 0;
  a.valid = std::sscanf(text.c_str(), "%x:%x:%x.%x", &a.domain, &a.bus, &a.device, &function) == 4;
  return a;
}

class Nvml {
 public:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    init_ = load<nvmlReturn (*)()>("nvmlInit_v2");
    shutdown_ = load<nvmlReturn (*)()>("nvmlShutdown");
    by_pci_ =
        load<nvmlReturn (*)(const char*, nvmlDeviceHandle*)>("nvmlDeviceGetHandleByPciBusId_v2");
    link_state_ =
        load<nvmlReturn (*)(nvmlDeviceHandle, unsigned int, int*)>("nvmlDeviceGetNvLinkState");
    remote_pci_ = load<nvmlReturn (*)(nvmlDeviceHandle, unsigned int, NvmlPciInfo*)>(
        "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    remote_type_ = load<nvmlReturn (*)(nvmlDeviceHandle, unsigned int, int*)>(
        "nvmlDeviceGetNvLinkRemoteDeviceType");
    p2p_status_ = load<nvmlReturn (*)(nvmlDeviceHandle, nvmlDeviceHandle, int, int*)>(
        "nvmlDeviceGetP2PStatus");
    ready_ = init_ && shutdown_ && by_pci_ && link_state_ && remote_pci_ && init_() == kNvmlSuccess;
  }
  ~Nvml() {
    if (ready_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  bool ready() const { return ready_; }

  nvmlDeviceHandle handle(const std::string& pci) const {
    nvmlDeviceHandle h = nullptr;
    return by_pci_(pci.c_str(), &h) == kNvmlSuccess ? h : nullptr;
  }

  // True when `gpu` has an active NVLink to `peer_pci`, or NVML reports NVLink P2P between
  // them, or both have active links into NVSwitches.
  bool nvlink_between(nvmlDeviceHandle gpu, nvmlDeviceHandle peer,
                      const PciAddress& peer_pci) const {
    for (unsigned int link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      if (!link_active(gpu, link)) continue;
      NvmlPciInfo remote;
      std::memset(&remote, 0, sizeof(remote));
      if (remote_pci_(gpu, link, &remote) != kNvmlSuccess) continue;
      PciAddress r{remote.domain, remote.bus, remote.device, true};
      if (r == peer_pci) return true;
    }
    if (p2p_status_) {
      int status = -1;
      if (p2p_status_(gpu, peer, kNvmlP2PCapsIndexNvLink, &status) == kNvmlSuccess &&
          status == kNvmlP2PStatusOk) {
        return true;
      }
    }
    return reaches_switch(gpu) && reaches_switch(peer);
  }

 private:
  template <typename F>
  F load(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }
  bool link_active(nvmlDeviceHandle gpu, unsigned int link) const {
    int state = 0;
    return link_state_(gpu, link, &state) == kNvmlSuccess && state == kNvmlFeatureEnabled;
  }
  bool reaches_switch(nvmlDeviceHandle gpu) const {
    if (!remote_type_) return false;
    for (unsigned int link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
      int type = -1;
      if (link_active(gpu, link) && remote_type_(gpu, link, &type) == kNvmlSuccess &&
          type == kNvmlNvLinkDeviceTypeSwitch) {
        return true;
      }
    }
    return false;
  }

  void* lib_ = nullptr;
  bool ready_ = false;
  nvmlReturn (*init_)() = nullptr;
  nvmlReturn (*shutdown_)() = nullptr;
  nvmlReturn (*by_pci_)(const char*, nvmlDeviceHandle*) = nullptr;
  nvmlReturn (*link_state_)(nvmlDeviceHandle, unsigned int, int*) = nullptr;
  nvmlReturn (*remote_pci_)(nvmlDeviceHandle, unsigned int, NvmlPciInfo*) = nullptr;
  nvmlReturn (*remote_type_)(nvmlDeviceHandle, unsigned int, int*) = nullptr;
  nvmlReturn (*p2p_status_)(nvmlDeviceHandle, nvmlDeviceHandle, int, int*) = nullptr;
};

// Fallback without NVML (see the file comment for why rank 0 means NVLink).
LinkClass classify_with_cuda(int device, const std::string& peer_pci) {
  int peer_device = -1;
  if (cudaDeviceGetByPCIBusId(&peer_device, peer_pci.c_str()) != cudaSuccess) {
    cudaGetLastError();
    return LinkClass::kPCIe;  // not visible here: nothing better to say
  }
  if (peer_device == device) return LinkClass::kNVLink;  // two ranks on one GPU share memory
  int access = 0;
  int performance_rank = -1;
  if (cudaDeviceGetP2PAttribute(&access, cudaDevP2PAttrAccessSupported, device, peer_device) !=
          cudaSuccess ||
      cudaDeviceGetP2PAttribute(&performance_rank, cudaDevP2PAttrPerformanceRank, device,
                                peer_device) != cudaSuccess) {
    cudaGetLastError();
    return LinkClass::kPCIe;
  }
  return access && performance_rank == 0 ? LinkClass::kNVLink : LinkClass::kPCIe;
}

// The link between this process' GPU `device` (PCI `pci`) and the GPU at `peer_pci` of the
// same host.
LinkClass classify_same_host(const Nvml& nvml, int device, const std::string& pci,
                             const std::string& peer_pci) {
  nvmlDeviceHandle mine = nvml.ready() ? nvml.handle(pci) : nullptr;
  nvmlDeviceHandle other = nvml.ready() ? nvml.handle(peer_pci) : nullptr;
  if (mine == nullptr || other == nullptr) return classify_with_cuda(device, peer_pci);
  if (other == mine) return LinkClass::kNVLink;  // two ranks on one GPU
  return nvml.nvlink_between(mine, other, parse_pci(peer_pci)) ? LinkClass::kNVLink
                                                               : LinkClass::kPCIe;
}

std::string pci_bus_id(int device) {
  char pci[64] = {};
  TESSERA_CUDA_CHECK(cudaDeviceGetPCIBusId(pci, sizeof(pci) - 1, device));
  return pci;
}

std::string read_boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  return id;
}

std::string host_name_of_this_process() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace

Topology detect_topology(Bootstrap& bootstrap, int device) {
  const int size = bootstrap.size();
  const int rank = bootstrap.rank();
  int visible = 0;
  TESSERA_CUDA_CHECK(cudaGetDeviceCount(&visible));
  TESSERA_CHECK_ARG(device >= 0 && device < visible, "detect_topology(device = ", device,
                    "): expected 0 <= device < ", visible, " (visible GPUs)");

  const std::string pci = pci_bus_id(device);
  const std::string host = host_name_of_this_process();
  // One exchange carries "hostname\nboot_id\npci\ndevice".
  const std::vector<std::string> records =
      bootstrap.allgather_strings(str(host, "\n", read_boot_id(), "\n", pci, "\n", device));
  TESSERA_CHECK(int(records.size()) == size, ErrorCode::kInternal, "allgather_strings returned ",
                records.size(), " records for ", size, " ranks");

  Topology topology;
  topology.world_size = size;
  topology.machine_of_rank.resize(size);
  topology.local_rank.resize(size);
  topology.host_name.resize(size);
  topology.device_of_rank.resize(size);
  std::vector<std::string> identity(size);
  std::vector<std::string> pci_of_rank(size);
  std::vector<std::string> machines;  // identity per machine, in order of first appearance
  for (int r = 0; r < size; ++r) {
    std::istringstream in(records[r]);
    std::string boot_id, device_text;
    std::getline(in, topology.host_name[r]);
    std::getline(in, boot_id);
    std::getline(in, pci_of_rank[r]);
    std::getline(in, device_text);
    identity[r] = topology.host_name[r] + "/" + boot_id;
    topology.device_of_rank[r] = std::atoi(device_text.c_str());
    int machine = 0;
    while (machine < int(machines.size()) && machines[machine] != identity[r]) ++machine;
    if (machine == int(machines.size())) machines.push_back(identity[r]);
    topology.machine_of_rank[r] = machine;
    int local = 0;
    for (int q = 0; q < r; ++q) local += topology.machine_of_rank[q] == machine;
    topology.local_rank[r] = local;
  }

  // This rank's row.
  Nvml nvml;
  std::vector<uint8_t> row(size);
  for (int peer = 0; peer < size; ++peer) {
    LinkClass link;
    if (peer == rank) {
      link = LinkClass::kSelf;
    } else if (identity[peer] != identity[rank]) {
      link = LinkClass::kNetwork;
    } else {
      link = classify_same_host(nvml, device, pci, pci_of_rank[peer]);
    }
    row[peer] = uint8_t(link);
  }
  std::vector<uint8_t> matrix(size_t(size) * size);
  bootstrap.allgather(row.data(), matrix.data(), size_t(size));
  topology.links.resize(matrix.size());
  for (size_t i = 0; i < matrix.size(); ++i) topology.links[i] = LinkClass(matrix[i]);
  topology.emulated = false;
  TESSERA_LOG(kDebug, "topology (", nvml.ready() ? "NVML" : "CUDA P2P attributes", "):\n",
              topology.to_string());
  return topology;
}

std::vector<LinkClass> detect_local_links(int num_devices) {
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    cudaGetLastError();
    visible = 0;
  }
  TESSERA_CHECK_ARG(num_devices >= 0 && num_devices <= visible,
                    "detect_local_links(num_devices = ", num_devices, "): expected 0..", visible,
                    " (visible GPUs)");
  std::vector<std::string> pci(num_devices);
  for (int d = 0; d < num_devices; ++d) pci[d] = pci_bus_id(d);
  Nvml nvml;
  std::vector<LinkClass> links(size_t(num_devices) * num_devices, LinkClass::kSelf);
  for (int a = 0; a < num_devices; ++a) {
    for (int b = 0; b < num_devices; ++b) {
      if (a != b) links[size_t(a) * num_devices + b] = classify_same_host(nvml, a, pci[a], pci[b]);
    }
  }
  return links;
}

}  // namespace tessera
