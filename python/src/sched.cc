// tessera.sched: the operator scheduler (sched/schedule.h) from Python. Built-in strategies are
// named ("sequential", "nanoflow", "dual_batch", "single_batch", "tokenweave"); a strategy written
// in Python is an object with split(lengths) and schedule(ctx) that the model runtime calls inside
// a forward (tessera.model.Llama.forward(..., strategy=...)):
//   split(lengths)  lengths: each sequence's new tokens, in batch order; returns how many
//                   consecutive sequences each nano-batch takes (a list of ints), or None for one
//   schedule(ctx)   runs every step through ctx.ready(n) / ctx.run(n, step) / ctx.run_next(n) /
//                   ctx.run_fused(n, step, group, chunks=1, gemm_sm_percent=100) until
//                   ctx.finished
//   fused_groups    (optional) the kinds of fused group schedule() runs through run_fused:
//                   "all_reduce_norm", "row_parallel_pair", "row_parallel_pipelined";
//                   run_fused refuses any other
// A step is (layer, op) with op one of llama_op_name's names. The ScheduleContext lives only
// while schedule() runs; a handle kept past that raises.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "sched_strategy.h"
#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

using PyStep = std::tuple<int64_t, std::string>;

PyStep py_step(sched::Step s) {
  return {s.layer, model::llama_op_name(s.op)};
}
sched::Step step_argument(const PyStep& s) {
  return {std::get<0>(s), model::parse_llama_op(std::get<1>(s))};
}

// What Python holds of a ScheduleContext: cleared when schedule() returns.
struct ContextRef {
  sched::ScheduleContext* ctx = nullptr;
  sched::ScheduleContext& get() const {
    TESSERA_CHECK_ARG(ctx != nullptr,
                      "ScheduleContext: used after its strategy's schedule() returned");
    return *ctx;
  }
};
struct ScheduleView {
  std::shared_ptr<ContextRef> ref;
};

// Nano-batches of `counts` consecutive sequences each, from the batch's row layout.
std::vector<sched::NanoBatch> nano_batches(const model::PackedBatch& batch,
                                           const std::vector<int64_t>& counts) {
  std::vector<sched::NanoBatch> out;
  size_t next = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    TESSERA_CHECK_ARG(counts[i] >= 1, "split(): nano-batch ", i, " takes ", counts[i],
                      " sequences: expected >= 1");
    TESSERA_CHECK_ARG(next + size_t(counts[i]) <= batch.sequences.size(),
                      "split(): the nano-batches take more than the batch's ",
                      batch.sequences.size(), " sequences");
    out.push_back(sched::nano_batch_of(batch, next, size_t(counts[i])));
    next += size_t(counts[i]);
  }
  TESSERA_CHECK_ARG(next == batch.sequences.size(), "split(): the nano-batches take ", next,
                    " of the batch's ", batch.sequences.size(),
                    " sequences: expected every sequence in one");
  return out;
}

// A Python strategy's fused_groups names.
model::FusedGroup fused_group_argument(const std::string& name, const char* what) {
  if (name == "all_reduce_norm") return model::FusedGroup::kAllReduceNorm;
  if (name == "row_parallel_pair") return model::FusedGroup::kRowParallelPair;
  if (name == "row_parallel_pipelined") return model::FusedGroup::kRowParallelPipelined;
  throw_error(ErrorCode::kInvalidArgument,
              str(what, ": '", name,
                  "': expected all_reduce_norm, row_parallel_pair or row_parallel_pipelined"));
}

std::vector<int64_t> lengths_of(const model::PackedBatch& batch) {
  std::vector<int64_t> lengths;
  for (const model::PackedSequence& s : batch.sequences) lengths.push_back(s.num_tokens);
  return lengths;
}

}  // namespace

PythonStrategy::PythonStrategy(nb::object strategy) : strategy_(std::move(strategy)) {
  for (const char* method : {"split", "schedule"}) {
    TESSERA_CHECK_ARG(nb::hasattr(strategy_, method), "strategy: a ",
                      Py_TYPE(strategy_.ptr())->tp_name, " object without ", method,
                      "(): expected a built-in strategy's name or an object with split(lengths) "
                      "and schedule(ctx)");
  }
}

PythonStrategy::~PythonStrategy() {
  nb::gil_scoped_acquire gil;
  strategy_.reset();
}

std::string PythonStrategy::name() const {
  nb::gil_scoped_acquire gil;
  nb::object name = nb::getattr(strategy_, "name", nb::none());
  if (nb::isinstance<nb::str>(name)) return nb::cast<std::string>(name);
  return Py_TYPE(strategy_.ptr())->tp_name;
}

std::vector<sched::NanoBatch> PythonStrategy::split(const model::PackedBatch& batch) const {
  nb::gil_scoped_acquire gil;
  nb::object counts = strategy_.attr("split")(lengths_of(batch));
  if (counts.is_none()) return sched::token_balanced_split(batch, 1);  // the batch whole
  std::vector<int64_t> parts;
  TESSERA_CHECK_ARG(nb::try_cast(counts, parts), "split(): returned a ",
                    Py_TYPE(counts.ptr())->tp_name,
                    " object: expected a list of sequence counts, one per nano-batch, or None");
  return nano_batches(batch, parts);
}

std::vector<model::FusedGroup> PythonStrategy::fused_groups() const {
  nb::gil_scoped_acquire gil;
  nb::object names = nb::getattr(strategy_, "fused_groups", nb::none());
  if (names.is_none()) return {};
  std::vector<std::string> list;
  TESSERA_CHECK_ARG(!nb::isinstance<nb::str>(names) && nb::try_cast(names, list), "fused_groups: a ",
                    Py_TYPE(names.ptr())->tp_name,
                    " object: expected a list of names (all_reduce_norm, row_parallel_pair)");
  std::vector<model::FusedGroup> out;
  for (const std::string& name : list) out.push_back(fused_group_argument(name, "fused_groups"));
  return out;
}

void PythonStrategy::schedule(sched::ScheduleContext& ctx) const {
  nb::gil_scoped_acquire gil;
  auto ref = std::make_shared<ContextRef>(ContextRef{&ctx});
  struct Clear {
    ContextRef& r;
    ~Clear() { r.ctx = nullptr; }
  } clear{*ref};
  strategy_.attr("schedule")(ScheduleView{ref});
}

std::unique_ptr<sched::Strategy> strategy_argument(const nb::handle& strategy,
                                                   const sched::RuleKey& key) {
  if (nb::isinstance<nb::str>(strategy))
    return sched::make_named_strategy(nb::cast<std::string>(strategy), key);
  return std::make_unique<PythonStrategy>(nb::borrow(strategy));
}

void bind_sched(nb::module_& m) {
  nb::class_<ScheduleView>(m, "ScheduleContext",
                           "The steps of one forward's nano-batches, as a strategy's schedule() "
                           "sees them (valid only while it runs).")
      .def_prop_ro(
          "num_nano_batches", [](const ScheduleView& v) { return v.ref->get().num_nano_batches(); },
          "How many nano-batches split() made.")
      .def(
          "ready",
          [](const ScheduleView& v, int n) -> std::optional<PyStep> {
            const std::optional<sched::Step> s = v.ref->get().ready(n);
            if (!s) return std::nullopt;
            return py_step(*s);
          },
          nb::arg("n"), "Nano-batch n's next step (layer, op), or None once its chain is done.")
      .def(
          "run",
          [](const ScheduleView& v, int n, const PyStep& step) {
            v.ref->get().run(n, step_argument(step));
          },
          nb::arg("n"), nb::arg("step"),
          "Runs `step` on nano-batch n; it must be ready(n) (else an error naming what it waits "
          "for).")
      .def(
          "run_next", [](const ScheduleView& v, int n) { v.ref->get().run_next(n); }, nb::arg("n"),
          "Runs ready(n).")
      .def(
          "run_fused",
          [](const ScheduleView& v, int n, const PyStep& first, const std::string& group,
             int chunks, int gemm_sm_percent) {
            v.ref->get().run_fused(n, step_argument(first), fused_group_argument(group, "group"),
                                   {chunks, gemm_sm_percent});
          },
          nb::arg("n"), nb::arg("first"), nb::arg("group"), nb::arg("chunks") = 1,
          nb::arg("gemm_sm_percent") = 100,
          "Runs the two steps of nano-batch n's chain from `first` as one fused operation of kind "
          "`group` (the model's): 'all_reduce_norm' (an all-reduce with the RMSNorm after it), "
          "'row_parallel_pair' (a row-parallel GEMM and its all-reduce as GEMM+ReduceScatter) or "
          "'row_parallel_pipelined' (that pair in `chunks` row chunks, its GEMMs on "
          "gemm_sm_percent of the multiprocessors on a GPU).")
      .def_prop_ro(
          "finished", [](const ScheduleView& v) { return v.ref->get().finished(); },
          "Whether every nano-batch's chain is done.")
      .def_prop_ro(
          "trace",
          [](const ScheduleView& v) {
            std::vector<std::tuple<int, int64_t, std::string>> out;
            for (const auto& [n, s] : v.ref->get().trace())
              out.emplace_back(n, s.layer, model::llama_op_name(s.op));
            return out;
          },
          "(nano-batch, layer, op) in the order they ran.");

  m.def(
      "op_kind",
      [](const std::string& op) {
        return std::string(model::op_kind_name(model::llama_op_kind(model::parse_llama_op(op))));
      },
      nb::arg("op"), "compute, memory or network: what an operation is bound by.");
  m.def("strategies", &sched::strategy_names, "The built-in strategies' names.");
  m.def(
      "token_balanced_split",
      [](const std::vector<int64_t>& lengths, int parts) {
        model::PackedBatch batch;
        int64_t row = 0;
        for (size_t i = 0; i < lengths.size(); ++i) {
          TESSERA_CHECK_ARG(lengths[i] >= 0, "lengths[", i, "] = ", lengths[i], ": expected >= 0");
          batch.sequences.push_back({int64_t(i), 0, lengths[i], row});
          row += lengths[i];
        }
        batch.positions.resize(size_t(row));
        std::vector<int64_t> counts;
        for (const sched::NanoBatch& n : sched::token_balanced_split(batch, parts))
          counts.push_back(int64_t(n.num_seqs));
        return counts;
      },
      nb::arg("lengths"), nb::arg("parts"),
      "Sequences per nano-batch when `lengths` (each sequence's tokens) are cut into at most "
      "`parts` nano-batches of about equal tokens (NanoFlow's split).");
}

}  // namespace tessera::python
