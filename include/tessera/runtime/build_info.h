// What this build of Tessera contains and which library versions it runs against.
#pragma once

#include <string>
#include <vector>

#include "tessera/core/tensor_view.h"

namespace tessera {

struct GpuInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
  double memory_gib = 0;
  std::string pci_bus_id;
};

struct BuildInfo {
  std::string version;             // Tessera's
  bool has_cuda = false;           // the cuda backend is compiled in
  std::string cuda_runtime;        // "13.0" (cudaRuntimeGetVersion)
  std::string cuda_driver;         // what the driver supports; "none" without a driver
  std::string nccl_compiled, nccl_runtime;  // ncclGetVersion at run time
  std::string nvshmem;             // headers compiled against
  std::string cutlass;             // headers compiled against
};

BuildInfo build_info();
std::vector<GpuInfo> visible_gpus();  // empty without the cuda backend or a GPU
// "cpu" for the cpu, a GPU's name from visible_gpus() ("NVIDIA H200"), "cuda" when unknown:
// how benchmark records and tuning tables name the device.
std::string device_name(const Device& device);

}  // namespace tessera
