// The parts of the tessera._C module, each bound in its own file (module.cc calls them in
// order: errors first, so every later binding's tessera::Error becomes tessera.Error).
#pragma once

#include <nanobind/nanobind.h>

namespace tessera::python {

void bind_errors(nanobind::module_& m);         // errors.cc
void bind_info(nanobind::module_& m);           // info.cc
void bind_attention(nanobind::module_& m);      // attention.cc
void bind_attention_fp8(nanobind::module_& m);  // attention_fp8.cc
void bind_ranks(nanobind::module_& m);          // ranks.cc
void bind_sp_attention(nanobind::module_& sp);  // sp_attention.cc
void bind_tp_operation(nanobind::module_& tp);  // tp_operation.cc
void bind_tp_loopback(nanobind::module_& tp);   // tp_loopback.cc
void bind_decode_block(nanobind::module_& decode);  // decode_block.cc
void bind_sched(nanobind::module_& sched);          // sched.cc
void bind_model(nanobind::module_& model);      // model.cc
void bind_testing(nanobind::module_& m);        // testing.cc

}  // namespace tessera::python
