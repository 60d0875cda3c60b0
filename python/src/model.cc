// tessera.model.Llama: a Llama-family decoder (Llama 2/3, Qwen2.5) on one rank, as `tessera run
// llm` runs it: the float32 reference layers on the cpu backend (model/llama_model.h), bf16 on
// one GPU with CUDA graphs for decode on cuda (model/llama_gpu_model.h). Configuration from a
// preset or a Hugging Face config.json; weights from .safetensors (Hugging Face names) or random
// from a seed. Sequences live in the model's paged KV cache: add_sequence(), then forward() with
// each sequence's new tokens; logits come back as a NumPy float32 array.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "sched_strategy.h"
#include "tessera/core/error.h"
#include "tessera/model/decoder_presets.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/weight_store.h"
#include "tessera/runtime/build_info.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

using Inputs = std::vector<std::pair<int64_t, std::vector<int32_t>>>;

class Llama {
 public:
  Llama(const std::string& config, std::optional<std::string> weights, uint64_t seed,
        const std::string& backend, int device, int64_t page_size, int64_t num_pages,
        int64_t max_context, int64_t max_batch, int64_t max_tokens, int64_t max_logit_rows)
      : config_(model::load_decoder_config(config, "config")) {
    TESSERA_CHECK_ARG(backend == "cpu" || backend == "cuda", "backend = '", backend,
                      "': expected cpu or cuda");
    TESSERA_CHECK_ARG(page_size >= 1, "page_size = ", page_size, ": expected >= 1");
    TESSERA_CHECK_ARG(num_pages >= 1, "num_pages = ", num_pages, ": expected >= 1");
    TESSERA_CHECK_ARG(max_context >= 1, "max_context = ", max_context, ": expected >= 1");
    TESSERA_CHECK_ARG(max_batch >= 1, "max_batch = ", max_batch, ": expected >= 1");
    TESSERA_CHECK_ARG(max_tokens >= 1, "max_tokens = ", max_tokens, ": expected >= 1");
    TESSERA_CHECK_ARG(max_logit_rows >= 1, "max_logit_rows = ", max_logit_rows, ": expected >= 1");
    if (weights) store_ = std::make_unique<model::WeightStore>(model::WeightStore::open(*weights));
    const model::LlamaTensorSource source =
        store_ ? model::store_llama_source(*store_) : model::random_llama_source(seed);
    if (backend == "cpu") {
      cpu_ = std::make_unique<model::LlamaModel>(config_,
                                                 model::load_llama_weights(config_, source, 0, 1),
                                                 model::KvCacheSize{page_size, num_pages}, nullptr);
    } else {
      device_ = device;
      model::LlamaGpuOptions o;
      o.device = device;
      o.cache = {page_size, num_pages};
      o.max_context = max_context;
      o.max_batch = max_batch;
      o.max_tokens = max_tokens;
      o.max_logit_rows = max_logit_rows;
      gpu_ = std::make_unique<model::LlamaGpuModel>(config_, source, o, nullptr);
    }
  }

  const model::DecoderConfig& config() const { return config_; }
  std::string backend() const { return cpu_ ? "cpu" : "cuda"; }

  int64_t add_sequence() { return cpu_ ? cpu_->add_sequence() : gpu_->add_sequence(); }
  void release_sequence(int64_t seq_id) {
    cpu_ ? cpu_->release_sequence(seq_id) : gpu_->release_sequence(seq_id);
  }
  int64_t length(int64_t seq_id) const {
    return cpu_ ? cpu_->cache().length(seq_id) : gpu_->length(seq_id);
  }

  NumpyArray forward(const Inputs& inputs, const std::string& rows, const nb::handle& strategy) {
    TESSERA_CHECK_ARG(rows == "all" || rows == "last", "rows = '", rows,
                      "': expected all (every new token's logits) or last (each input's last)");
    TESSERA_CHECK_ARG(!inputs.empty(), "inputs is empty: expected (seq_id, tokens) pairs");
    std::vector<model::SequenceTokens> seqs;
    for (const auto& [seq_id, tokens] : inputs) seqs.push_back({seq_id, tokens});
    const bool all = rows == "all";
    std::unique_ptr<sched::Strategy> order;
    if (!strategy.is_none()) {
      // The cuda model keeps a decode graph per (batch size, strategy name): a Python object
      // could order two calls differently under one name.
      TESSERA_CHECK(cpu_ != nullptr || nb::isinstance<nb::str>(strategy), ErrorCode::kUnsupported,
                    "strategy: a ", Py_TYPE(strategy.ptr())->tp_name,
                    " object on backend = 'cuda': expected a built-in strategy's name "
                    "(tessera.sched.strategies()); Python strategies run on the cpu backend");
      order = strategy_argument(
          strategy, {device_name(cpu_ ? Device::cpu() : Device::cuda(device_)), 1,
                     config_.hidden_size});
    }
    std::vector<float> logits;
    {
      nb::gil_scoped_release release;  // a Python strategy takes it back while it runs
      logits = cpu_ ? last_rows_if(order ? cpu_->forward(seqs, *order) : cpu_->forward(seqs),
                                   seqs, all)
                    : gpu_->forward(seqs, all ? model::LogitRows::kAll : model::LogitRows::kLast,
                                    order.get());
    }
    const int64_t v = config_.vocab_size, r = int64_t(logits.size()) / v;
    NumpyArray out = new_numpy_array(DType::kF32, {r, v});
    std::copy(logits.begin(), logits.end(), static_cast<float*>(out.data()));
    return out;
  }

  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t steps) {
    TESSERA_CHECK_ARG(!prompt.empty(), "prompt is empty: expected at least one token id");
    TESSERA_CHECK_ARG(steps >= 0, "steps = ", steps, ": expected >= 0");
    nb::gil_scoped_release release;
    return cpu_ ? cpu_->generate_greedy(prompt, steps) : gpu_->generate_greedy(prompt, steps);
  }

 private:
  // The cpu model returns every new token's row; "last" keeps each input's final one.
  std::vector<float> last_rows_if(std::vector<float> logits,
                                  const std::vector<model::SequenceTokens>& seqs, bool all) const {
    if (all) return logits;
    return model::last_token_logits(logits, seqs, config_.vocab_size);
  }

  model::DecoderConfig config_;
  std::unique_ptr<model::WeightStore> store_;  // outlives the models that read it
  std::unique_ptr<model::LlamaModel> cpu_;
  std::unique_ptr<model::LlamaGpuModel> gpu_;
  int device_ = 0;  // cuda: the GPU the model runs on
};

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Llama>(m, "Llama",
                    "A Llama-family decoder (Llama 2/3, Qwen2.5) on one rank: float32 reference\n"
                    "layers on the cpu backend, bf16 with CUDA graphs on one GPU.")
      .def(nb::init<const std::string&, std::optional<std::string>, uint64_t, const std::string&,
                    int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>(),
           nb::arg("config"), nb::arg("weights") = nb::none(), nb::arg("seed") = 1,
           nb::arg("backend") = "cpu", nb::arg("device") = 0, nb::arg("page_size") = 16,
           nb::arg("num_pages") = 256, nb::arg("max_context") = 4096, nb::arg("max_batch") = 64,
           nb::arg("max_tokens") = 4096, nb::arg("max_logit_rows") = 64,
           "config: a preset (tiny, llama3-8b, llama3-70b) or a config.json (file or directory).\n"
           "weights: a .safetensors file or a directory of them (Hugging Face names); None:\n"
           "random from seed. backend: cpu or cuda. The KV cache holds num_pages pages of\n"
           "page_size tokens. cuda only: max_context, max_batch, max_tokens (rows of one\n"
           "forward) and max_logit_rows (rows of logits one forward returns) size the plans.")
      .def_prop_ro("vocab_size", [](const Llama& l) { return l.config().vocab_size; })
      .def_prop_ro("num_layers", [](const Llama& l) { return l.config().num_hidden_layers; })
      .def_prop_ro("hidden_size", [](const Llama& l) { return l.config().hidden_size; })
      .def_prop_ro("backend", &Llama::backend)
      .def("add_sequence", &Llama::add_sequence, "A new, empty sequence; returns its id.")
      .def("release_sequence", &Llama::release_sequence, nb::arg("seq_id"),
           "Frees the sequence's pages.")
      .def("length", &Llama::length, nb::arg("seq_id"), "Tokens cached for the sequence.")
      .def("forward", &Llama::forward, nb::arg("inputs"), nb::arg("rows") = "all",
           nb::arg("strategy").none() = nb::none(),
           "inputs: (seq_id, new token ids) pairs, prefills and decodes mixed. Appends the\n"
           "tokens to their sequences and returns float32 logits [R, vocab_size]: every new\n"
           "token's row in input order (rows='all') or each input's last row (rows='last').\n"
           "strategy: the order of the layers' operations over nano-batches, a built-in\n"
           "one's name (tessera.sched.strategies()), 'auto' (the strategy measured fastest\n"
           "near the step's rows: TESSERA_SCHED_TUNE_TABLE) or, on cpu, a Python object with\n"
           "split(lengths) and schedule(ctx) (tessera.sched). cpu: every order gives bitwise\n"
           "the same logits; cuda: the nano-batches run on compute, memory and network\n"
           "streams, within bf16 rounding of the unscheduled forward.")
      .def("generate", &Llama::generate, nb::arg("prompt"), nb::arg("steps"),
           "Greedy generation: prefills prompt in a new sequence, then steps argmax tokens;\n"
           "returns them (the sequence is released).");
}

}  // namespace tessera::python
