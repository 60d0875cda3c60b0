// tessera.decode.AttentionBlock: the attention block of one decode step (decode/attention_block.h,
// ClusterFusion's fused kernel on cuda): input RMSNorm, QKV projection, RoPE, the new token's K
// and V appended to the cache, attention over it and the output projection, for a batch of
// sequences that each add one token. Planned once (model, batch and context bounds, layout,
// device), called per step with the step's arrays; the cache is updated in place.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/decode/attention_block.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

constexpr const char* kGroupedKeys[] = {"name",     "hidden",     "num_heads",   "num_kv_heads",
                                        "head_dim", "rope_theta", "rms_norm_eps"};

// A preset's name, or a dict of a grouped-query model's shape (kGroupedKeys).
decode::ModelConfig model_argument(const nb::handle& model) {
  if (nb::isinstance<nb::str>(model))
    return decode::ModelConfig::by_name(nb::cast<std::string>(model));
  TESSERA_CHECK_ARG(nb::isinstance<nb::dict>(model), "model: a ", Py_TYPE(model.ptr())->tp_name,
                    " object: expected a preset's name or a dict of hidden, num_heads, "
                    "num_kv_heads, head_dim (and rope_theta, rms_norm_eps, name)");
  nb::dict d = nb::borrow<nb::dict>(model);
  for (auto [key, value] : d) {
    const std::string name = nb::cast<std::string>(nb::str(key));
    bool known = false;
    for (const char* k : kGroupedKeys) known = known || name == k;
    TESSERA_CHECK_ARG(known, "model['", name,
                      "']: not a field: expected hidden, num_heads, "
                      "num_kv_heads, head_dim, rope_theta, rms_norm_eps or name");
  }
  auto required = [&](const char* key) {
    TESSERA_CHECK_ARG(d.contains(key), "model['", key, "']: missing");
    return nb::cast<int64_t>(d[key]);
  };
  decode::ModelConfig m;
  m.name = d.contains("name") ? nb::cast<std::string>(d["name"]) : std::string("custom");
  m.kind = decode::AttentionKind::kGrouped;
  m.hidden = required("hidden");
  m.num_heads = required("num_heads");
  m.num_kv_heads = required("num_kv_heads");
  m.head_dim = required("head_dim");
  if (d.contains("rope_theta")) m.rope_theta = nb::cast<float>(d["rope_theta"]);
  if (d.contains("rms_norm_eps")) m.rms_norm_eps = nb::cast<float>(d["rms_norm_eps"]);
  TESSERA_CHECK_ARG(m.hidden >= 1 && m.num_heads >= 1 && m.num_kv_heads >= 1 && m.head_dim >= 2 &&
                        m.head_dim % 2 == 0 && m.num_heads % m.num_kv_heads == 0,
                    "model: hidden ", m.hidden, ", num_heads ", m.num_heads, ", num_kv_heads ",
                    m.num_kv_heads, ", head_dim ", m.head_dim,
                    ": expected positive sizes, an even head_dim and num_kv_heads dividing "
                    "num_heads");
  return m;
}

decode::DecodeImpl impl_argument(const std::string& text) {
  if (text == "auto") return decode::DecodeImpl::kAuto;
  if (text == "fused") return decode::DecodeImpl::kFused;
  if (text == "unfused") return decode::DecodeImpl::kUnfused;
  throw_error(ErrorCode::kInvalidArgument,
              str("impl = '", text, "': expected auto, fused or unfused"));
}

Device device_argument(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string index = text.substr(5);
    const bool digits = !index.empty() && index.size() <= 4 &&
                        index.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return Device::cuda(std::stoi(index));
  }
  throw_error(ErrorCode::kInvalidArgument,
              str("device = '", text, "': expected cpu, cuda or cuda:N"));
}

// weights[key] as a view; absent optional keys give an empty view.
TensorView weight(const nb::dict& weights, const char* key, int ndim, bool optional = false) {
  if (!weights.contains(key) || weights[key].is_none()) {
    TESSERA_CHECK_ARG(optional, "weights['", key, "']: missing");
    return {};
  }
  const std::string name = str("weights['", key, "']");
  return checked_view(array_argument<InArray>(weights[key], name.c_str()),
                      {name.c_str(), ndim == 1 ? "[n]" : "[rows, cols]", ndim});
}

class AttentionBlockLayer {
 public:
  AttentionBlockLayer(const nb::handle& model, int64_t max_batch, int64_t max_context,
                      const nb::handle& dtype, bool paged, int64_t page_size,
                      const std::string& device, const std::string& impl, int cluster_size) {
    decode::AttentionBlockOptions o;
    o.model = model_argument(model);
    o.max_batch = max_batch;
    o.max_context = max_context;
    o.dtype = dtype_argument(dtype, "dtype");
    o.paged = paged;
    o.page_size = page_size;
    o.device = device_argument(device);
    o.impl = impl_argument(impl);
    o.cluster_size = cluster_size;
    block_ = std::make_unique<decode::AttentionBlock>(o);
  }

  nb::object call(const InArray& x_arr, const nb::handle& positions_arr, const nb::dict& weights,
                  const OutArray& k_cache, std::optional<OutArray> v_cache,
                  const nb::handle& page_table_arr, nb::object out, const nb::handle& workspace_arr,
                  uint64_t stream_handle) {
    const bool latent = block_->options().model.kind == decode::AttentionKind::kLatent;
    decode::DecodeStep step;
    step.x = checked_view(x_arr, {"x", "[B, hidden]", 2});
    step.positions =
        index_view(array_argument<InArray>(positions_arr, "positions"), {"positions", "[B]", 1});
    decode::KvCache cache;
    cache.k = checked_view(k_cache, {"k_cache", "[B or pages, tokens, Hkv, D]", 4, true});
    if (v_cache)
      cache.v = checked_view(*v_cache, {"v_cache", "[B or pages, tokens, Hkv, D]", 4, true});
    if (!page_table_arr.is_none()) {
      cache.page_table = index_view(array_argument<InArray>(page_table_arr, "page_table"),
                                    {"page_table", "[B, pages_per_seq]", 2});
    }
    const Output o = output_argument(out, {"out", "[B, hidden]", 2, true}, step.x, "x",
                                     {step.x.size(0), step.x.size(1)}, step.x.dtype(),
                                     str("x's shape ", shape_string(step.x)), "x's");
    step.out = o.view;
    TensorView workspace;
    if (!workspace_arr.is_none())
      workspace = bytes_view(array_argument<OutArray>(workspace_arr, "workspace"), "workspace");
    const Stream stream = stream_for(stream_handle, step.x.device());
    if (latent) {
      TESSERA_CHECK_ARG(!v_cache, "v_cache: given for an MLA model (", block_->options().model.name,
                        "), whose cache holds latent rows only: expected None");
      decode::LatentAttentionWeights w{
          weight(weights, "wq", 2),        weight(weights, "wkv_a", 2),
          weight(weights, "kv_a_norm", 1), weight(weights, "wkv_b", 2),
          weight(weights, "wo", 2),        weight(weights, "input_norm", 1, true)};
      nb::gil_scoped_release released;
      block_->run(step, w, cache, workspace, stream);
    } else {
      decode::AttentionWeights w{weight(weights, "wq", 2), weight(weights, "wk", 2),
                                 weight(weights, "wv", 2), weight(weights, "wo", 2),
                                 weight(weights, "input_norm", 1, true)};
      nb::gil_scoped_release released;
      block_->run(step, w, cache, workspace, stream);
    }
    return o.object;
  }

  const decode::AttentionBlock& block() const { return *block_; }

 private:
  std::unique_ptr<decode::AttentionBlock> block_;
};

}  // namespace

void bind_decode_block(nb::module_& decode) {
  nb::class_<AttentionBlockLayer>(
      decode, "AttentionBlock",
      "The attention block of one decode step (ClusterFusion): RMSNorm, QKV projection, RoPE, "
      "cache append, attention and output projection, planned once and called per step.")
      .def(nb::init<const nb::handle&, int64_t, int64_t, const nb::handle&, bool, int64_t,
                    const std::string&, const std::string&, int>(),
           nb::arg("model"), nb::kw_only(), nb::arg("max_batch") = 1, nb::arg("max_context") = 4096,
           nb::arg("dtype") = "bfloat16", nb::arg("paged") = false, nb::arg("page_size") = 16,
           nb::arg("device") = "cpu", nb::arg("impl") = "auto", nb::arg("cluster_size") = 0,
           "model: a preset (llama2-7b, llama3-8b, deepseek-v2-lite) or a dict of hidden, "
           "num_heads, num_kv_heads, head_dim (rope_theta, rms_norm_eps, name optional). dtype: "
           "of x, weights, cache and out (bfloat16 or float16; the cpu also float32). paged: the "
           "cache as pages [pages, page_size, Hkv, D] with a page table. device: cpu or cuda:N. "
           "impl: auto (the fused kernel where it takes the shape), fused or unfused. "
           "cluster_size: 0 for the tuned or modelled choice.")
      .def("__call__", &AttentionBlockLayer::call, nb::arg("x"), nb::arg("positions"),
           nb::arg("weights"), nb::arg("k_cache"), nb::arg("v_cache").none() = nb::none(),
           nb::kw_only(), nb::arg("page_table").none() = nb::none(), nb::arg("out") = nb::none(),
           nb::arg("workspace").none() = nb::none(), nb::arg("stream") = 0,
           "One step: x [B, hidden], positions int32 [B] (tokens already cached per sequence), "
           "weights a dict of Hugging Face's layouts (wq, wk, wv, wo [, input_norm]; MLA: wq, "
           "wkv_a, kv_a_norm, wkv_b, wo [, input_norm]), k_cache and v_cache [B, max_context, "
           "Hkv, D] (paged: [pages, page_size, Hkv, D] and page_table int32 [B, pages_per_seq]), "
           "updated in place. Returns out [B, hidden] (None: a new array, NumPy on the cpu, from "
           "x's framework on a GPU). workspace: workspace_bytes of scratch on a GPU.")
      .def_prop_ro(
          "workspace_bytes",
          [](const AttentionBlockLayer& l) { return l.block().workspace_bytes(); },
          "Scratch a GPU call needs (the package allocates it from x's framework).")
      .def_prop_ro(
          "cluster_size", [](const AttentionBlockLayer& l) { return l.block().cluster_size(); },
          "CTAs per cluster of the fused kernel.")
      .def_prop_ro(
          "impl",
          [](const AttentionBlockLayer& l) {
            return std::string(l.block().impl() == decode::DecodeImpl::kFused ? "fused"
                                                                              : "unfused");
          },
          "fused or unfused, as planned.")
      .def_prop_ro(
          "summary", [](const AttentionBlockLayer& l) { return l.block().describe(); },
          "One line: model, fused or not, cluster size, dtype, layout.");
}

}  // namespace tessera::python
