// The switch of kernels/pdl.cuh.
#include "pdl.cuh"

#include "tessera/core/params.h"

namespace tessera::kernels {
namespace {

const Param<bool> kPdl("TESSERA_PDL", true,
                       "launch the layer and decode kernels with programmatic dependent launch "
                       "(Hopper): each may start while the one before it finishes");

bool device_supports_pdl() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  return major >= 9;
}

}  // namespace

bool pdl_enabled() {
  static const bool enabled = kPdl.get() && device_supports_pdl();
  return enabled;
}

}  // namespace tessera::kernels
