// Helpers for the package's own tests (tessera._C._testing), kept out of the public API.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

// Backing for views that claim another device: never read, since the device checks refuse
// them first; it only gives the view a non-null address.
alignas(64) char g_unread[64];

// A float32 view that says it lives on `device` ("cuda" or "rocm"), so the device checks can
// be tested on a machine without that device.
nb::ndarray<> foreign_device_array(const std::vector<size_t>& shape, const std::string& device) {
  int type = nb::device::cuda::value;
  if (device == "rocm")
    type = nb::device::rocm::value;
  else
    TESSERA_CHECK_ARG(device == "cuda", "device = '", device, "': expected cuda or rocm");
  nb::capsule owner(g_unread, [](void*) noexcept {});  // static memory: nothing to free
  return nb::ndarray<>(g_unread, shape.size(), shape.data(), owner, nullptr, nb::dtype<float>(),
                       type, 0);
}

}  // namespace

void bind_testing(nb::module_& m) {
  nb::module_ t = m.def_submodule("_testing", "Helpers for tessera's own tests.");
  t.def("foreign_device_array", foreign_device_array, nb::arg("shape"), nb::arg("device"),
        "A float32 array view that claims to live on a cuda (or rocm) device; its memory is "
        "never read. For testing the device checks on a machine without a GPU.");
}

}  // namespace tessera::python
