// tessera._C: the extension module behind the `tessera` Python package (python/tessera/).
// Only host code and DLPack cross this boundary: no framework's headers or ABI.
#include <nanobind/nanobind.h>

#include "bindings.h"

NB_MODULE(_C, m) {
  m.doc() = "Tessera's C++ library, bound with nanobind (use the `tessera` package instead).";
  tessera::python::bind_errors(m);
  tessera::python::bind_info(m);
  tessera::python::bind_attention(m);
  tessera::python::bind_attention_fp8(m);
  tessera::python::bind_ranks(m);
  nanobind::module_ sp = m.def_submodule("sp", "Sequence-parallel attention.");
  tessera::python::bind_sp_attention(sp);
  nanobind::module_ tp = m.def_submodule("tp", "Tensor-parallel GEMMs with their communication.");
  tessera::python::bind_tp_operation(tp);
  tessera::python::bind_tp_loopback(tp);
  nanobind::module_ decode = m.def_submodule("decode", "The decode step's attention block.");
  tessera::python::bind_decode_block(decode);
  nanobind::module_ sched = m.def_submodule("sched", "The operator scheduler (DynaFlow).");
  tessera::python::bind_sched(sched);
  nanobind::module_ model = m.def_submodule("model", "The model runtime: Llama-family decoders.");
  tessera::python::bind_model(model);
  tessera::python::bind_testing(m);
}
