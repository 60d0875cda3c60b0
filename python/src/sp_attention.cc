// tessera.sp.Attention: sequence-parallel attention as a model calls it (sp/attention_layer.h).
// Planned once per layer shape on a rank context (collective: every rank constructs it with the
// same arguments), then called every step with this rank's shards:
//   q [B, L_r, H, D], k and v [B, L_r, Hkv, D]  ->  o [B, L_r, H, D]
// where L_r = local_rows and local row i holds image token local_tokens[i]. With joint tokens
// (J > 0) it also takes the replicated joint_q/k/v [B, J, H|Hkv, D] and returns (o, joint_o).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "arrays.h"
#include "bindings.h"
#include "rank_session.h"
#include "tessera/core/error.h"
#include "tessera/sp/attention_layer.h"
#include "tessera/sp/plan.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

class SpAttentionLayer {
 public:
  SpAttentionLayer(const RankContextHandle& ctx, int64_t seq_len, int heads, int head_dim,
                   int64_t batch, int kv_heads, const nb::handle& dtype, bool causal,
                   int64_t joint_tokens, const std::string& method, const std::string& comm,
                   std::optional<std::string> layout, int ulysses_degree,
                   std::optional<std::tuple<int, int>> mesh_tile,
                   std::optional<double> softmax_scale)
      : session_(ctx.session) {
    RankContext& rank_ctx = session_->context("ctx");
    sp::PlanRequest request;
    request.batch = batch;
    request.seq_len = seq_len;
    request.heads = heads;
    request.kv_heads = kv_heads;
    request.head_dim = head_dim;
    request.dtype = dtype_argument(dtype, "dtype");
    request.causal = causal;
    request.joint_tokens = joint_tokens;
    request.options.method = sp::parse_method(method, "method");
    request.options.comm = sp::parse_comm_mode(comm, "comm");
    if (layout) request.options.layout = sp::parse_token_layout(*layout, "layout");
    request.options.ulysses_degree = ulysses_degree;
    if (mesh_tile) std::tie(request.options.mesh_rows, request.options.mesh_cols) = *mesh_tile;
    sp::SpAttentionOptions options;
    if (softmax_scale) options.softmax_scale = float(*softmax_scale);
    std::unique_ptr<sp::SpAttention> layer;
    {
      nb::gil_scoped_release released;  // collective: the other ranks plan meanwhile
      layer = sp::SpAttention::create(rank_ctx, request, options);
    }
    layer_ = session_->adopt(std::move(layer));
  }

  // Collective: every rank calls it once per step.
  nb::object call(const InArray& q_arr, const InArray& k_arr, const InArray& v_arr, nb::object out,
                  std::optional<InArray> joint_q, std::optional<InArray> joint_k,
                  std::optional<InArray> joint_v, nb::object joint_out, uint64_t stream_handle) {
    std::shared_ptr<sp::SpAttention> layer = live("sp.Attention");
    const sp::AttentionShape& s = layer->shape();
    sp::SpAttentionTensors t;
    t.q = checked_view(q_arr, {"q", "[B, L_r, H, D]", 4});
    t.k = checked_view(k_arr, {"k", "[B, L_r, Hkv, D]", 4});
    t.v = checked_view(v_arr, {"v", "[B, L_r, Hkv, D]", 4});
    const int64_t rows = layer->local_rows();
    check_shape(
        t.q, "q", {s.batch, rows, s.heads, s.head_dim},
        str("[B=", s.batch, ", L_r=", rows, " (local_rows), H=", s.heads, ", D=", s.head_dim, "]"));
    const std::string kv_expected = str("[B=", s.batch, ", L_r=", rows,
                                        " (local_rows), Hkv=", s.kv_heads, ", D=", s.head_dim, "]");
    check_shape(t.k, "k", {s.batch, rows, s.kv_heads, s.head_dim}, kv_expected);
    check_shape(t.v, "v", {s.batch, rows, s.kv_heads, s.head_dim}, kv_expected);
    nb::object o_obj = output(out, "out", t.q, {s.batch, rows, s.heads, s.head_dim}, t.o);

    const bool joint = s.joint_tokens > 0;
    nb::object jo_obj;
    if (joint) {
      const int64_t J = s.joint_tokens;
      TESSERA_CHECK_ARG(joint_q && joint_k && joint_v,
                        "joint_q, joint_k, joint_v: the layer "
                        "was planned with joint_tokens = ",
                        J, ": expected all three");
      t.joint_q = checked_view(*joint_q, {"joint_q", "[B, J, H, D]", 4});
      t.joint_k = checked_view(*joint_k, {"joint_k", "[B, J, Hkv, D]", 4});
      t.joint_v = checked_view(*joint_v, {"joint_v", "[B, J, Hkv, D]", 4});
      check_shape(t.joint_q, "joint_q", {s.batch, J, s.heads, s.head_dim},
                  str("[B=", s.batch, ", J=", J, ", H=", s.heads, ", D=", s.head_dim, "]"));
      const std::string jkv =
          str("[B=", s.batch, ", J=", J, ", Hkv=", s.kv_heads, ", D=", s.head_dim, "]");
      check_shape(t.joint_k, "joint_k", {s.batch, J, s.kv_heads, s.head_dim}, jkv);
      check_shape(t.joint_v, "joint_v", {s.batch, J, s.kv_heads, s.head_dim}, jkv);
      jo_obj = output(joint_out, "joint_out", t.q, {s.batch, J, s.heads, s.head_dim}, t.joint_o);
    } else {
      TESSERA_CHECK_ARG(!joint_q && !joint_k && !joint_v && joint_out.is_none(),
                        "joint_q/k/v/out: given, but the layer was planned with joint_tokens = "
                        "0: expected None");
    }
    for (const auto& [view, name] :
         {std::pair{&t.k, "k"}, std::pair{&t.v, "v"}, std::pair{&t.o, "out"},
          std::pair{&t.joint_q, "joint_q"}, std::pair{&t.joint_k, "joint_k"},
          std::pair{&t.joint_v, "joint_v"}, std::pair{&t.joint_o, "joint_out"}}) {
      if (!view->empty()) check_same_device(*view, name, t.q, "q");
    }
    TESSERA_CHECK_ARG(t.q.dtype() == s.dtype, "q: dtype ", dtype_name(t.q.dtype()),
                      ": expected the layer's dtype ", dtype_name(s.dtype));
    const Stream stream = stream_for(stream_handle, t.q.device());
    {
      nb::gil_scoped_release released;  // collective: the other ranks run meanwhile
      layer->run(t, stream);
    }
    if (joint) return nb::make_tuple(o_obj, jo_obj);
    return o_obj;
  }

  // Image token indices (0 .. seq_len - 1) of this rank's local rows, in row order.
  NumpyArray local_tokens() const {
    std::shared_ptr<sp::SpAttention> layer = live("local_tokens");
    const std::vector<int64_t> tokens = layer->local_sequence_tokens();
    std::vector<size_t> dims = {tokens.size()};
    auto* idx = new int64_t[tokens.empty() ? 1 : tokens.size()];
    std::copy(tokens.begin(), tokens.end(), idx);
    nb::capsule owner(idx, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
    return NumpyArray(idx, 1, dims.data(), owner, nullptr, nb::dtype<int64_t>());
  }

  std::shared_ptr<sp::SpAttention> live(const char* what) const {
    std::shared_ptr<sp::SpAttention> layer = layer_.lock();
    TESSERA_CHECK_ARG(layer != nullptr, what,
                      ": this sp.Attention's rank context has ended (use a layer only inside "
                      "the rank function that planned it)");
    return layer;
  }

 private:
  // The output argument `name` of `shape` (arrays.h output_argument); sets `view`.
  static nb::object output(const nb::object& out, const char* name, const TensorView& like,
                           const std::vector<int64_t>& shape, TensorView& view) {
    std::string expected = "[";
    for (size_t i = 0; i < shape.size(); ++i) expected += str(i ? ", " : "", shape[i]);
    Output o = output_argument(out, {name, "[B, rows, H, D]", 4, true}, like, "q", shape,
                               like.dtype(), expected + "]", "q's");
    view = o.view;
    return o.object;
  }

  std::shared_ptr<RankSession> session_;  // keeps the session (not the context) alive
  std::weak_ptr<sp::SpAttention> layer_;
};

}  // namespace

void bind_sp_attention(nb::module_& sp) {
  nb::class_<SpAttentionLayer>(
      sp, "Attention",
      "Sequence-parallel attention, planned once and called per layer on every rank.")
      .def(nb::init<const RankContextHandle&, int64_t, int, int, int64_t, int, const nb::handle&,
                    bool, int64_t, const std::string&, const std::string&,
                    std::optional<std::string>, int, std::optional<std::tuple<int, int>>,
                    std::optional<double>>(),
           nb::arg("ctx"), nb::kw_only(), nb::arg("seq_len"), nb::arg("heads"), nb::arg("head_dim"),
           nb::arg("batch") = 1, nb::arg("kv_heads") = 0, nb::arg("dtype") = "float32",
           nb::arg("causal") = false, nb::arg("joint_tokens") = 0, nb::arg("method") = "auto",
           nb::arg("comm") = "two-sided", nb::arg("layout") = nb::none(),
           nb::arg("ulysses_degree") = 0, nb::arg("mesh_tile") = nb::none(),
           nb::arg("softmax_scale") = nb::none(),
           "Plans attention over seq_len image tokens (plus joint_tokens replicated ones) "
           "sharded over ctx's ranks. Collective: every rank passes the same arguments.\n\n"
           "method: auto (the sim executor times every method and keeps the fastest), ring, "
           "ulysses, usp, tas, torus or mesh. comm: two-sided or one-sided. layout: None (the "
           "method's default), contiguous, striped or zigzag. kv_heads: 0 for heads (GQA: a "
           "divisor). dtype: float32, float16 or bfloat16 (cpu backend: all three).")
      .def("__call__", &SpAttentionLayer::call, nb::arg("q"), nb::arg("k"), nb::arg("v"),
           nb::kw_only(), nb::arg("out") = nb::none(), nb::arg("joint_q") = nb::none(),
           nb::arg("joint_k") = nb::none(), nb::arg("joint_v") = nb::none(),
           nb::arg("joint_out") = nb::none(), nb::arg("stream") = 0,
           "Runs the plan on this rank's shards q [B, L_r, H, D], k, v [B, L_r, Hkv, D] (rows "
           "in local_tokens order) and returns out [B, L_r, H, D]; with joint tokens also takes "
           "joint_q/k/v [B, J, H|Hkv, D] and returns (out, joint_out). Collective. Outputs given "
           "as None are new arrays (NumPy on the cpu, from q's framework on a GPU). stream: a "
           "cudaStream_t as an int for cuda arrays (None: the current stream of q's framework, "
           "torch or CuPy), 0 on cpu.")
      .def_prop_ro("local_tokens", &SpAttentionLayer::local_tokens, nb::rv_policy::move,
                   "int64 [L_r]: the image token (0 .. seq_len - 1) each local row holds.")
      .def_prop_ro(
          "local_rows",
          [](const SpAttentionLayer& l) { return l.live("local_rows")->local_rows(); },
          "L_r: this rank's image rows.")
      .def_prop_ro(
          "joint_tokens",
          [](const SpAttentionLayer& l) { return l.live("joint_tokens")->shape().joint_tokens; },
          "J: the replicated joint (text) tokens in front of the image tokens.")
      .def_prop_ro(
          "method", [](const SpAttentionLayer& l) { return l.live("method")->plan().method; },
          "The method planned (what auto chose): ring, ulysses, usp, tas, torus or mesh.")
      .def_prop_ro(
          "summary", [](const SpAttentionLayer& l) { return l.live("summary")->describe(); },
          "One line: the plan (method, parameters, steps, bytes) and the memory held.")
      .def_prop_ro(
          "softmax_scale",
          [](const SpAttentionLayer& l) { return l.live("softmax_scale")->softmax_scale(); },
          "The scale of q k^T (default 1 / sqrt(head_dim)).")
      .def(
          "plan_json",
          [](const SpAttentionLayer& l) { return sp::to_json(l.live("plan_json")->plan()); },
          "The plan as JSON (every rank's steps), as `tessera plan` prints it.");
}

}  // namespace tessera::python
