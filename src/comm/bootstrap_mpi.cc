// The mpi bootstrap: allgather over a duplicate of MPI_COMM_WORLD, for mpirun/srun launches
// when Tessera is built with MPI (src/CMakeLists.txt defines TESSERA_WITH_MPI and links
// MPI::MPI_C when CMake finds MPI; without it this file compiles to nothing and such launches
// use the tcp bootstrap, see bootstrap.cc).
//
// Bounding waits: a blocking MPI_Allgather cannot be given a timeout, so every collective here
// is nonblocking (MPI_Comm_idup, MPI_Iallgather) and polled with MPI_Test until
// wait_timeout_ms(). On expiry it throws kTimeout. MPI cannot say which rank did not enter the
// collective, and an outstanding collective cannot be cancelled, so after a timeout the
// bootstrap refuses further calls. MPI_Init itself is bounded only by the MPI launcher.
//
// MPI is initialized here only when nobody did (MPI_Init_thread asking MPI_THREAD_MULTIPLE);
// then it is finalized at exit. The local rank and size come from the processor names every
// rank reports (ranks with the same name share a host), which overrides the launcher's
// variables when they disagree.
#if defined(TESSERA_WITH_MPI)

// C bindings only: Open MPI and MPICH would otherwise pull in their deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace tessera::detail {
namespace {

using Clock = std::chrono::steady_clock;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw_error(ErrorCode::kSystem, str("mpi bootstrap: ", what, " failed: ", text));
}

void finalize_mpi_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiBootstrap final : public Bootstrap {
 public:
  explicit MpiBootstrap(const LaunchInfo& info) : info_(info) {
    int initialized = 0, finalized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
    TESSERA_CHECK(!finalized, ErrorCode::kUnsupported,
                  "mpi bootstrap: MPI was already finalized in this process: expected MPI to be "
                  "initialized or not yet initialized");
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                "MPI_Init_thread");
      std::atexit(finalize_mpi_at_exit);
      TESSERA_LOG(kDebug, "mpi bootstrap initialized MPI (thread level ", provided, ")");
    }
    int world_rank = 0, world_size = 0;
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
    TESSERA_CHECK(world_rank == info.rank && world_size == info.size, ErrorCode::kInvalidArgument,
                  "mpi bootstrap: the launcher's variables say rank ", info.rank, " of ", info.size,
                  " but MPI_COMM_WORLD says rank ", world_rank, " of ", world_size,
                  ": expected the same");

    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "MPI_Comm_idup");
    wait(request, "MPI_Comm_idup of MPI_COMM_WORLD");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    compute_local_ranks();
  }

  ~MpiBootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After a timeout a collective is still pending on comm_; freeing it then is not allowed.
    if (!finalized && comm_ != MPI_COMM_NULL && !failed_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  int local_rank() const override { return info_.local_rank; }
  int local_size() const override { return info_.local_size; }
  const char* kind() const override { return "mpi"; }

  void allgather(const void* send, void* recv, size_t bytes) override {
    TESSERA_CHECK_ARG((send != nullptr && recv != nullptr) || bytes == 0,
                      "Bootstrap::allgather: send = ", send, ", recv = ", recv,
                      " with bytes = ", bytes, ": expected buffers of `bytes` bytes");
    TESSERA_CHECK_ARG(bytes <= size_t(INT_MAX), "Bootstrap::allgather (mpi): bytes = ", bytes,
                      ": expected at most ", INT_MAX, " (an MPI count)");
    TESSERA_CHECK(!failed_, ErrorCode::kPeerFailure, "rank ", info_.rank,
                  ": the mpi bootstrap is unusable after an earlier error: ", *failed_);
    ++round_;
    if (bytes == 0) {
      // MPI allows zero counts; keep it collective so a missing rank is still noticed.
      uint8_t token = 0;
      std::vector<uint8_t> sink(size_t(info_.size));
      gather(&token, sink.data(), 1);
      return;
    }
    gather(send, recv, bytes);
  }

 private:
  void gather(const void* send, void* recv, size_t bytes) {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(
        MPI_Iallgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, comm_, &request),
        "MPI_Iallgather");
    wait(request, "MPI_Iallgather");
  }

  // Polls `request` until it completes or the wait timeout expires.
  void wait(MPI_Request& request, const char* what) {
    const int64_t timeout_ms = wait_timeout_ms();
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::milliseconds(timeout_ms);
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      if (Clock::now() >= deadline) {
        std::string message =
            str("rank ", info_.rank, ": ", what, " (bootstrap round ", round_,
                ") did not complete within ", timeout_ms, " ms: some rank of ", info_.size,
                " did not enter it (MPI cannot say which); the mpi bootstrap is unusable now");
        failed_ = message;
        throw_error(ErrorCode::kTimeout, message);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

  void compute_local_ranks() {
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int length = 0;
    check_mpi(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
    std::vector<char> mine(MPI_MAX_PROCESSOR_NAME + 1, '\0');
    std::memcpy(mine.data(), name, size_t(length));
    std::vector<char> all(mine.size() * size_t(info_.size));
    ++round_;
    gather(mine.data(), all.data(), mine.size());
    int local_rank = 0, local_size = 0;
    for (int r = 0; r < info_.size; ++r) {
      if (std::strcmp(all.data() + size_t(r) * mine.size(), mine.data()) != 0) continue;
      if (r < info_.rank) ++local_rank;
      ++local_size;
    }
    if (local_rank != info_.local_rank || local_size != info_.local_size) {
      TESSERA_LOG(kInfo, "mpi bootstrap: local rank ", local_rank, " of ", local_size, " on ", name,
                  " (the launcher's variables said ", info_.local_rank, " of ", info_.local_size,
                  ")");
    }
    info_.local_rank = local_rank;
    info_.local_size = local_size;
  }

  LaunchInfo info_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t round_ = 0;
  std::optional<std::string> failed_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_mpi_bootstrap(const LaunchInfo& info) {
  return std::make_unique<MpiBootstrap>(info);
}

}  // namespace tessera::detail

#endif  // TESSERA_WITH_MPI
