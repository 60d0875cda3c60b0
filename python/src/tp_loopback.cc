// tessera.tp.Loopback: the P ranks of a fused tensor-parallel operation in one process on one
// GPU (tp/loopback.h): the fused operations, their signals, copies and tile orders on real
// hardware without several GPUs. A call takes every rank's operands as lists, rank r's as
// rank_shapes(request, r) says (ag_gemm: a [m_r, K], b [N/P, K], out [M, N/P]); TpLoopback
// checks them and names the rank of any that does not fit.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/tp/loopback.h"
#include "tp_shapes.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

class LoopbackLayer {
 public:
  LoopbackLayer(const std::string& op, int64_t m, int64_t n, int64_t k, int ranks,
                const nb::handle& dtype, bool bias, int device, int64_t comm_rows) {
    TESSERA_CHECK_ARG(ranks >= 1, "ranks = ", ranks, ": expected >= 1");
    TESSERA_CHECK_ARG(device >= 0, "device = ", device, ": expected a CUDA device index >= 0");
    TESSERA_CHECK_ARG(comm_rows >= 0, "comm_rows = ", comm_rows,
                      ": expected >= 0 (0: each rank's whole shard)");
    tp::TpPlan plan;
    plan.request.op = tp::parse_tp_op(op, "op");
    plan.request.m = m;
    plan.request.n = n;
    plan.request.k = k;
    plan.request.dtype = plan.request.out_dtype = dtype_argument(dtype, "dtype");
    plan.request.weight_layout = tp::WeightLayout::kNK;
    plan.request.has_bias = bias;
    plan.request.world_size = ranks;
    plan.request.num_machines = 1;
    plan.comm_rows = comm_rows;
    loopback_ = std::make_unique<tp::TpLoopback>(plan, Device::cuda(device));
  }

  void call(const std::vector<InArray>& a, const std::vector<InArray>& b,
            const std::optional<std::vector<InArray>>& bias, const std::vector<OutArray>& out,
            uint64_t stream_handle) {
    const int p = loopback_->plan().request.world_size;
    auto views = [&](const auto& arrays, const char* name, const char* layout) {
      TESSERA_CHECK_ARG(int(arrays.size()) == p, name, " holds ", arrays.size(),
                        " arrays: expected one per rank (", p, ")");
      std::vector<TensorView> out_views;
      for (size_t r = 0; r < arrays.size(); ++r) {
        const std::string what = str(name, "[", r, "]");
        out_views.push_back(
            checked_view(arrays[r], {what.c_str(), layout, 2, std::string_view(name) == "out"}));
      }
      return out_views;
    };
    const std::vector<TensorView> av = views(a, "a", "shapes(rank)['a']"),
                                  bv = views(b, "b", "shapes(rank)['b']"),
                                  ov = views(out, "out", "shapes(rank)['out']");
    std::vector<TensorView> biasv = bias ? views(*bias, "bias", "[1, shapes(rank)['bias']]")
                                         : std::vector<TensorView>(size_t(p));
    const Stream stream = stream_for(stream_handle, av[0].device());
    nb::gil_scoped_release released;
    loopback_->run(av, bv, biasv, ov, stream);
  }

  nb::dict shapes(int rank) const {
    const tp::TpRequest& r = loopback_->plan().request;
    TESSERA_CHECK_ARG(rank >= 0 && rank < r.world_size, "rank = ", rank, ": expected 0 to ",
                      r.world_size - 1);
    return shapes_dict(tp::rank_shapes(r, rank));
  }

  const tp::TpLoopback& loopback() const { return *loopback_; }

 private:
  std::unique_ptr<tp::TpLoopback> loopback_;
};

}  // namespace

void bind_tp_loopback(nb::module_& tp) {
  nb::class_<LoopbackLayer>(
      tp, "Loopback",
      "A fused tensor-parallel operation of `ranks` ranks in this process on one GPU (each "
      "rank's kernels on 1/ranks of the multiprocessors, its peers' buffers on the same "
      "device): checks the fused operations without several GPUs. Timings are not those of "
      "`ranks` GPUs.")
      .def(nb::init<const std::string&, int64_t, int64_t, int64_t, int, const nb::handle&, bool,
                    int, int64_t>(),
           nb::kw_only(), nb::arg("op") = "ag_gemm", nb::arg("m"), nb::arg("n"), nb::arg("k"),
           nb::arg("ranks") = 4, nb::arg("dtype") = "bfloat16", nb::arg("bias") = false,
           nb::arg("device") = 0, nb::arg("comm_rows") = 0,
           "op: ag_gemm, gemm_rs or gemm_a2a. M rows, N output and K input features over "
           "`ranks` ranks; dtype bfloat16 or float16 for a, b, out and bias; weights [N, K]. "
           "comm_rows: rows per communication tile of ag_gemm (0: each rank's whole shard). "
           "Raises UnsupportedError without a cuda build.")
      .def("__call__", &LoopbackLayer::call, nb::arg("a"), nb::arg("b"),
           nb::arg("bias").none() = nb::none(), nb::kw_only(), nb::arg("out"),
           nb::arg("stream") = 0,
           "Runs every rank: a, b, (bias) and out are lists of one cuda array per rank, shaped "
           "as shapes(rank) says. stream: a cudaStream_t as an int.")
      .def("shapes", &LoopbackLayer::shapes, nb::arg("rank"),
           "Rank `rank`'s operand shapes: {'a': (rows, cols), 'b': (rows, cols), 'bias': length "
           "or 0, 'out': (rows, cols)}.")
      .def_prop_ro(
          "dtype",
          [](const LoopbackLayer& l) {
            return std::string(dtype_name(l.loopback().plan().request.dtype));
          },
          "The dtype of a, b, out and bias ('f16' or 'bf16').")
      .def_prop_ro(
          "gemm_config", [](const LoopbackLayer& l) { return l.loopback().gemm_config(); },
          "ag_gemm: the fused kernel's GEMM configuration; '' for the others (Gemm's pick per "
          "owner).");
}

}  // namespace tessera::python
