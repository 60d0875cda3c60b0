// Helpers for the package's own tests (tessera._C._testing), kept out of the public API.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "tessera/attn/attention.h"
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

// Host seconds per call of the C++ attention entry (attn::forward) made `calls` times in a row
// from C++ on the same arrays: what a Python call to tessera.attention is measured against
// (bench/python_overhead.py). The launches are asynchronous; the caller synchronizes.
double time_attention_calls(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr,
                            const OutArray& out_arr, int calls, uint64_t stream_handle) {
  TESSERA_CHECK_ARG(calls >= 1, "calls = ", calls, ": expected >= 1");
  const TensorView q = checked_view(q_arr, {"q", "[B, Lq, Hq, D]", 4});
  const TensorView k = checked_view(k_arr, {"k", "[B, Lkv, Hkv, D]", 4});
  const TensorView v = checked_view(v_arr, {"v", "[B, Lkv, Hkv, D]", 4});
  const TensorView o = checked_view(out_arr, {"out", "[B, Lq, Hq, D]", 4, true});
  const Stream stream = stream_for(stream_handle, q.device());
  const float scale = attn::default_softmax_scale(q.size(3));
  nb::gil_scoped_release released;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    attn::forward(q, k, v, o, TensorView(), attn::MaskSpec::none(), scale, stream);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls;
}

}  // namespace

void bind_testing(nb::module_& m) {
  nb::module_ t = m.def_submodule("_testing", "Helpers for tessera's own tests.");
  t.def("foreign_device_array", foreign_device_array, nb::arg("shape"), nb::arg("device"),
        "A float32 array view that claims to live on a cuda (or rocm) device; its memory is "
        "never read. For testing the device checks on a machine without a GPU.");
  t.def("time_attention_calls", time_attention_calls, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("calls"), nb::arg("stream") = 0,
        "Host seconds per call of the C++ attention entry, `calls` calls in a row from C++ "
        "(non-causal, default scale): the baseline of the Python per-call overhead.");
}

}  // namespace tessera::python
