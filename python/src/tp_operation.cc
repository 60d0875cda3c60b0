// tessera.tp.Operation: a tensor-parallel GEMM with its communication (tp/operation.h, the Flux
// operations), planned once on a rank context (collective: every rank constructs it with the
// same arguments) and called per layer with this rank's operands (M rows in all, split over
// the P ranks as row_range says; b is this rank's weight shard):
//   ag_gemm   a [m_r, K]   b [N/P, K] or [K, N/P]   -> out [M, N/P]   (QKV, MLP gate/up)
//   gemm_rs   a [M, K/P]   b [N, K/P] or [K/P, N]   -> out [m_r, N]   (attention out, MLP down)
//   gemm_a2a  a [m_r, K]   b [N, K] or [K, N]       -> out [M, N/P]   (Ulysses' projection)
// fuse = auto plans with the cost model (and the tuning table of the GPU where one matches),
// falling back to the unfused pair (GEMM, then the NCCL collective) where fusion would lose or
// the backend does not build the fused form.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "arrays.h"
#include "bindings.h"
#include "rank_session.h"
#include "tp_shapes.h"
#include "tessera/core/error.h"
#include "tessera/tp/operation.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

tp::WeightLayout parse_weight_layout(const std::string& text) {
  if (text == "nk") return tp::WeightLayout::kNK;
  if (text == "kn") return tp::WeightLayout::kKN;
  throw_error(ErrorCode::kInvalidArgument,
              str("weight_layout = '", text,
                  "': expected nk ([N, K], torch's nn.Linear weight) or kn ([K, N])"));
}

tp::TpPlanOptions::Fuse parse_fuse(const std::string& text) {
  if (text == "auto") return tp::TpPlanOptions::Fuse::kAuto;
  if (text == "fused") return tp::TpPlanOptions::Fuse::kFused;
  if (text == "unfused") return tp::TpPlanOptions::Fuse::kUnfused;
  throw_error(ErrorCode::kInvalidArgument,
              str("fuse = '", text, "': expected auto, fused or unfused"));
}

class TpOperationLayer {
 public:
  TpOperationLayer(const RankContextHandle& ctx, const std::string& op, int64_t m, int64_t n,
                   int64_t k, const nb::handle& dtype, const nb::handle& out_dtype,
                   const std::string& weight_layout, bool bias, const std::string& fuse,
                   int64_t comm_rows)
      : session_(ctx.session) {
    RankContext& rank_ctx = session_->context("ctx");
    tp::TpRequest request;
    request.op = tp::parse_tp_op(op, "op");
    request.m = m;
    request.n = n;
    request.k = k;
    request.dtype = dtype_argument(dtype, "dtype");
    request.out_dtype =
        out_dtype.is_none() ? request.dtype : dtype_argument(out_dtype, "out_dtype");
    request.weight_layout = parse_weight_layout(weight_layout);
    request.has_bias = bias;
    tp::TpPlanOptions options;
    options.fuse = parse_fuse(fuse);
    options.comm_rows = comm_rows;
    const tp::TpPlan plan = tp::plan_for_context(rank_ctx, request, options);
    std::unique_ptr<tp::TpOperation> operation;
    {
      nb::gil_scoped_release released;  // collective: the other ranks construct meanwhile
      operation = std::make_unique<tp::TpOperation>(rank_ctx, plan);
    }
    op_ = session_->adopt(std::move(operation));
    rank_ = rank_ctx.rank;
  }

  // Collective: every rank calls it once per layer call.
  nb::object call(const InArray& a_arr, const InArray& b_arr, std::optional<InArray> bias_arr,
                  nb::object out, uint64_t stream_handle) {
    std::shared_ptr<tp::TpOperation> op = live("tp.Operation");
    const tp::RankShapes s = op->shapes();
    const TensorView a = checked_view(a_arr, {"a", "[rows, K]", 2});
    const TensorView b = checked_view(b_arr, {"b", "[N, K] or [K, N]", 2});
    TensorView bias;
    if (bias_arr) bias = checked_view(*bias_arr, {"bias", "[N]", 1});
    check_same_device(b, "b", a, "a");
    if (!bias.empty()) check_same_device(bias, "bias", a, "a");
    const Output o =
        output_argument(out, {"out", "[rows, N]", 2, true}, a, "a", {s.out_rows, s.out_cols},
                        op->plan().request.out_dtype,
                        str("[", s.out_rows, ", ", s.out_cols, "] (shapes['out'])"), "out_dtype");
    const Stream stream = stream_for(stream_handle, a.device());
    {
      nb::gil_scoped_release released;  // collective: the other ranks run meanwhile
      op->run(a, b, bias, o.view, stream);
    }
    return o.object;
  }

  std::pair<int64_t, int64_t> rows() const {
    const tp::TpRequest& r = live("rows")->plan().request;
    const tp::RowRange range = tp::row_range(r.m, r.world_size, rank_);
    return {range.begin, range.count};
  }

  std::shared_ptr<tp::TpOperation> live(const char* what) const {
    std::shared_ptr<tp::TpOperation> op = op_.lock();
    TESSERA_CHECK_ARG(op != nullptr, what,
                      ": this tp.Operation's rank context has ended (use it only while the "
                      "context that planned it is open)");
    return op;
  }

 private:
  std::shared_ptr<RankSession> session_;  // keeps the session (not the context) alive
  std::weak_ptr<tp::TpOperation> op_;
  int rank_ = 0;
};

nb::dict shapes_of(const TpOperationLayer& layer) {
  return shapes_dict(layer.live("shapes")->shapes());
}

}  // namespace

void bind_tp_operation(nb::module_& tp) {
  nb::class_<TpOperationLayer>(
      tp, "Operation",
      "A tensor-parallel GEMM with its communication (Flux), planned once and called per layer "
      "on every rank.")
      .def(nb::init<const RankContextHandle&, const std::string&, int64_t, int64_t, int64_t,
                    const nb::handle&, const nb::handle&, const std::string&, bool,
                    const std::string&, int64_t>(),
           nb::arg("ctx"), nb::kw_only(), nb::arg("op"), nb::arg("m"), nb::arg("n"), nb::arg("k"),
           nb::arg("dtype") = "bfloat16", nb::arg("out_dtype").none() = nb::none(),
           nb::arg("weight_layout") = "nk", nb::arg("bias") = false, nb::arg("fuse") = "auto",
           nb::arg("comm_rows") = -1,
           "Plans op (ag_gemm, gemm_rs or gemm_a2a) over M rows, N output and K input features "
           "across ctx's ranks. Collective: every rank passes the same arguments.\n\n"
           "dtype: of a and b (float32, float16, bfloat16); out_dtype: of out and bias (None: "
           "dtype). weight_layout: nk (b [N, K], torch's nn.Linear weight) or kn. fuse: auto "
           "(the planner's pick, the unfused pair where fusion would lose or the backend has no "
           "fused form), fused or unfused. comm_rows: AllGather's communication tile (-1: the "
           "planner's).")
      .def("__call__", &TpOperationLayer::call, nb::arg("a"), nb::arg("b"),
           nb::arg("bias").none() = nb::none(), nb::kw_only(), nb::arg("out") = nb::none(),
           nb::arg("stream") = 0,
           "Runs the operation on this rank's a, b (and bias) as `shapes` says; returns out "
           "(None: a new array of out_dtype, NumPy on the cpu, from a's framework on a GPU). "
           "Collective. stream: a cudaStream_t as an int for cuda arrays (None: the current "
           "stream of a's framework), 0 on cpu.")
      .def_prop_ro("shapes", shapes_of,
                   "This rank's operand shapes: {'a': (rows, cols), 'b': (rows, cols) in the "
                   "weight layout, 'bias': length or 0, 'out': (rows, cols)}.")
      .def_prop_ro("rows", &TpOperationLayer::rows,
                   "(begin, count): this rank's share of the M rows (a's rows for ag_gemm and "
                   "gemm_a2a, out's for gemm_rs).")
      .def_prop_ro(
          "fused", [](const TpOperationLayer& l) { return l.live("fused")->plan().fused; },
          "Whether the plan is the fused operation (else GEMM and collective one after the "
          "other).")
      .def_prop_ro(
          "reason", [](const TpOperationLayer& l) { return l.live("reason")->plan().reason; },
          "Why the planner chose fused or not.")
      .def_prop_ro(
          "out_dtype",
          [](const TpOperationLayer& l) {
            return std::string(dtype_name(l.live("out_dtype")->plan().request.out_dtype));
          },
          "The dtype of out and bias ('f32', 'f16' or 'bf16').")
      .def_prop_ro(
          "summary",
          [](const TpOperationLayer& l) { return tp::describe(l.live("summary")->plan()); },
          "One line: fused or not, tiles, transfer, route.")
      .def(
          "plan_json",
          [](const TpOperationLayer& l) { return tp::plan_to_json(l.live("plan_json")->plan()); },
          "The plan as JSON, as `tessera plan --tp` writes it.");
}

}  // namespace tessera::python
