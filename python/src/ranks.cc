// tessera.run_cpu_ranks (its C++ half, _C._run_cpu_ranks): runs a Python function on P rank
// threads of the cpu backend (comm/context.h run_cpu_ranks); tessera.cuda_context (its C++
// half, _C._cuda_context): this process's rank on the cuda backend, from the launcher's
// variables (torchrun, mpirun/srun, tessera's launcher; none: a world of one); and
// tessera.RankContext, what both hand to Python.
//
// GIL: the caller's thread releases it for the whole run; each rank thread takes it only to
// run Python code, and every binding that can wait on another rank (planning a layer, running
// it, barrier) releases it again, so ranks meet in C++ without holding it.
//
// Failures: the Python wrapper (tessera/_ranks.py) catches every exception inside the rank
// and returns (False, exception, code key, message); here that marks the rank failed (so
// ranks waiting for it stop with a peer failure instead of a timeout) and the wrapper then
// raises tessera.RankError naming the rank.
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "rank_session.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace nb = nanobind;

namespace tessera::python {

RankContext& RankSession::context(const char* what) const {
  TESSERA_CHECK_ARG(ctx_ != nullptr, what,
                    ": its rank context has ended (closed, or the function that "
                    "tessera.run_cpu_ranks ran for it returned)");
  return *ctx_;
}

void RankSession::close() {
  layers_.clear();
  owned_.reset();
  ctx_ = nullptr;
}

namespace {

ErrorCode code_from_key(const std::string& key) {
  if (key == "invalid_argument") return ErrorCode::kInvalidArgument;
  if (key == "unsupported") return ErrorCode::kUnsupported;
  if (key == "timeout") return ErrorCode::kTimeout;
  if (key == "peer_failure") return ErrorCode::kPeerFailure;
  return ErrorCode::kInternal;  // a Python exception, or a code with no peer meaning
}

// Runs `body(ctx)` with the GIL; returns the error that marks this rank failed, if any.
std::optional<Error> run_body(const nb::callable& body, const std::shared_ptr<RankSession>& session,
                              nb::object& result) {
  nb::gil_scoped_acquire gil;
  std::optional<Error> failure;
  try {
    result = body(RankContextHandle{session});
    nb::tuple t = nb::cast<nb::tuple>(result);
    if (!nb::cast<bool>(t[0])) {
      failure.emplace(code_from_key(nb::cast<std::string>(t[2])), nb::cast<std::string>(t[3]));
    }
  } catch (nb::python_error& e) {  // the wrapper itself failed: keep the message
    failure.emplace(ErrorCode::kInternal, e.what());
  } catch (const nb::cast_error&) {
    failure.emplace(ErrorCode::kInternal,
                    "run_cpu_ranks: the rank body returned no (ok, value, code, message) tuple");
  }
  session->close();
  return failure;
}

nb::list run_cpu_ranks_binding(int world_size, const nb::callable& body, int machines,
                               size_t heap_bytes) {
  check_params();  // a bad TESSERA_* value fails here, once, not in every rank
  ContextOptions options;
  options.heap_bytes = heap_bytes;
  std::vector<nb::object> results(size_t(std::max(world_size, 0)));
  std::optional<Error> run_error;
  {
    nb::gil_scoped_release released;
    try {
      run_cpu_ranks(world_size, machines, options, [&](RankContext& ctx) {
        auto session = std::make_shared<RankSession>(ctx);
        std::optional<Error> failure = run_body(body, session, results[size_t(ctx.rank)]);
        if (failure) throw *failure;
      });
    } catch (const Error& e) {
      run_error = e;
    }
  }
  nb::list out;
  bool body_failed = false;
  for (nb::object& r : results) {
    out.append(r.is_valid() ? r : nb::none());
    if (r.is_valid() && !nb::cast<bool>(nb::cast<nb::tuple>(r)[0])) body_failed = true;
  }
  // A rank's own exception is reported by the wrapper; raise here only what no body reported.
  if (run_error && !body_failed) throw *run_error;
  return out;
}

RankContextHandle cuda_context_binding(size_t heap_bytes, const std::string& heap_transport,
                                       int machines) {
  check_params();
  TESSERA_CHECK_ARG(machines >= 1, "machines = ", machines, ": expected >= 1");
  ContextOptions options;
  options.heap_bytes = heap_bytes;
  options.heap_transport = heap_transport;
  options.emulate_machines = machines;
  std::unique_ptr<RankContext> ctx;
  {
    nb::gil_scoped_release released;  // collective: waits for the other processes' ranks
    ctx = create_cuda_context(bootstrap_from_launch(detect_launch()), options);
  }
  return RankContextHandle{std::make_shared<RankSession>(std::move(ctx))};
}

void close_binding(const RankContextHandle& h) {
  TESSERA_CHECK_ARG(h.session->owns_context(),
                    "RankContext.close: this rank's context belongs to tessera.run_cpu_ranks "
                    "(it ends when the rank's function returns): expected a context from "
                    "tessera.cuda_context()");
  nb::gil_scoped_release released;  // tearing down NCCL and the heap is collective
  h.session->close();
  set_thread_rank(-1);  // errors raised after this name no rank ("tessera: ...")
}

}  // namespace

void bind_ranks(nb::module_& m) {
  nb::class_<RankContextHandle>(
      m, "RankContext",
      "One rank: a rank thread of tessera.run_cpu_ranks (valid only inside the function it "
      "runs), or this process's rank from tessera.cuda_context() (valid until close()).")
      .def_prop_ro(
          "rank", [](const RankContextHandle& h) { return h.session->context("ctx").rank; },
          "This rank, 0 .. size - 1.")
      .def_prop_ro(
          "size", [](const RankContextHandle& h) { return h.session->context("ctx").size; },
          "The number of ranks.")
      .def_prop_ro(
          "num_machines",
          [](const RankContextHandle& h) {
            return h.session->context("ctx").topology.num_machines();
          },
          "Machines the ranks are grouped into (emulated on the cpu backend).")
      .def_prop_ro(
          "backend",
          [](const RankContextHandle& h) {
            return std::string(backend_name(h.session->context("ctx").backend));
          },
          "'cpu' or 'cuda'.")
      .def_prop_ro(
          "device",
          [](const RankContextHandle& h) { return h.session->context("ctx").device.to_string(); },
          "The rank's device: 'cpu', or 'cuda:N' (N = the local rank).")
      .def_prop_ro(
          "is_open", [](const RankContextHandle& h) { return h.session->is_open(); },
          "False once closed, or once the rank's function returned.")
      .def("close", close_binding,
           "Ends a context from tessera.cuda_context(): destroys the layers planned on it, its "
           "communicators and symmetric heap. Collective. Idempotent.")
      .def(
          "__enter__", [](const RankContextHandle& h) { return h; }, "Returns the context.")
      .def(
          "__exit__",
          [](const RankContextHandle& h, nb::handle, nb::handle, nb::handle) {
            if (h.session->is_open()) close_binding(h);
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("traceback").none(),
          "close()s the context.")
      .def(
          "barrier",
          [](const RankContextHandle& h) {
            RankContext& ctx = h.session->context("ctx");
            nb::gil_scoped_release released;
            ctx.world->barrier(ctx.stream);
            ctx.world->synchronize(ctx.stream);
          },
          "Waits until every rank arrived (bounded by TESSERA_TIMEOUT_MS).");

  m.def("_cuda_context", cuda_context_binding, nb::arg("heap_bytes"), nb::arg("heap_transport"),
        nb::arg("machines"), "This process's cuda rank. Use tessera.cuda_context.");
  m.def("_run_cpu_ranks", run_cpu_ranks_binding, nb::arg("world_size"), nb::arg("body"),
        nb::arg("machines"), nb::arg("heap_bytes"),
        "Runs body(ctx) on world_size rank threads; body returns (ok, value, code, message). "
        "Use tessera.run_cpu_ranks.");
}

}  // namespace tessera::python
