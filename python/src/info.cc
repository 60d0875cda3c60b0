// tessera.info(): what this build contains (version, backends, library versions, how the
// module was compiled), the visible GPUs and every registered parameter, as plain dicts.
#include <Python.h>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "tessera/core/params.h"
#include "tessera/runtime/build_info.h"
#include "tessera/runtime/stream.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

#define TESSERA_STRINGIFY_IMPL(x) #x
#define TESSERA_STRINGIFY(x) TESSERA_STRINGIFY_IMPL(x)

nb::dict info() {
  const BuildInfo b = build_info();
  nb::dict d;
  d["version"] = b.version;
  nb::list backends;
  backends.append("cpu");
  if (b.has_cuda) backends.append("cuda");
  d["backends"] = backends;
  d["cuda_available"] = cuda_available();

  nb::dict build;
  build["build_type"] = TESSERA_PYTHON_BUILD_TYPE;
  build["compiler"] = TESSERA_PYTHON_COMPILER;
  build["python"] = PY_VERSION;
  build["nanobind"] = TESSERA_STRINGIFY(NB_VERSION_MAJOR) "." TESSERA_STRINGIFY(
      NB_VERSION_MINOR) "." TESSERA_STRINGIFY(NB_VERSION_PATCH);
  build["cuda_runtime"] = b.cuda_runtime;
  build["cuda_driver"] = b.cuda_driver;
  build["nccl_compiled"] = b.nccl_compiled;
  build["nccl_runtime"] = b.nccl_runtime;
  build["nvshmem"] = b.nvshmem;
  build["cutlass"] = b.cutlass;
  d["build"] = build;

  nb::list gpus;
  for (const GpuInfo& g : visible_gpus()) {
    nb::dict gpu;
    gpu["index"] = g.index;
    gpu["name"] = g.name;
    gpu["sm_count"] = g.sm_count;
    gpu["compute_capability"] = nb::make_tuple(g.compute_major, g.compute_minor);
    gpu["memory_gib"] = g.memory_gib;
    gpu["pci_bus_id"] = g.pci_bus_id;
    gpus.append(gpu);
  }
  d["gpus"] = gpus;

  nb::list params;
  for (const ParamInfo& p : all_params()) {
    nb::dict param;
    param["name"] = p.name;
    param["value"] = p.current_value;
    param["default"] = p.default_value;
    param["from_environment"] = p.from_environment;
    param["help"] = p.help;
    params.append(param);
  }
  d["params"] = params;
  return d;
}

}  // namespace

void bind_info(nb::module_& m) {
  m.def("info", info,
        "What this build of Tessera contains: version, backends, build details, visible GPUs "
        "and every environment parameter (name, value, default, help).");
}

}  // namespace tessera::python
