// A rank's operand shapes as the tensor-parallel bindings return them (tp_operation.cc,
// tp_loopback.cc): {'a': (rows, cols), 'b': (rows, cols), 'bias': length or 0, 'out': ...}.
#pragma once

#include <nanobind/nanobind.h>

#include "tessera/tp/request.h"

namespace tessera::python {

inline nanobind::dict shapes_dict(const tp::RankShapes& s) {
  nanobind::dict d;
  d["a"] = nanobind::make_tuple(s.a_rows, s.a_cols);
  d["b"] = nanobind::make_tuple(s.b_rows, s.b_cols);
  d["bias"] = s.bias;
  d["out"] = nanobind::make_tuple(s.out_rows, s.out_cols);
  return d;
}

}  // namespace tessera::python
