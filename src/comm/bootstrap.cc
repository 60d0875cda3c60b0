// Bootstrap collectives built on allgather (broadcast, barrier, allgather_strings), the
// one-rank bootstrap, and bootstrap_from_launch(), which picks the channel for a launch:
//   single                 -> one-rank bootstrap (also any launch of size 1 except the CLI's,
//                             whose hub expects its one worker to connect)
//   tessera-cli            -> tcp client of the CLI parent's hub
//   torchrun               -> tcp; rank 0 hosts the hub
//   mpi, slurm             -> MPI when built with it; else tcp with rank 0 hosting when
//                             MASTER_ADDR/MASTER_PORT are set; else kUnsupported
// Every wait is bounded by the implementation's allgather (see bootstrap_tcp.cc and
// bootstrap_mpi.cc).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/bootstrap_internal.h"
#include "tessera/core/error.h"

namespace tessera {

void Bootstrap::broadcast(void* data, size_t bytes, int root) {
  TESSERA_CHECK_ARG(root >= 0 && root < size(), "Bootstrap::broadcast: root = ", root,
                    ": expected a rank in [0, ", size(), ")");
  TESSERA_CHECK_ARG(data != nullptr || bytes == 0,
                    "Bootstrap::broadcast: data = null with bytes = ", bytes,
                    ": expected a buffer of `bytes` bytes");
  if (size() == 1 || bytes == 0) {
    if (bytes == 0) barrier();  // still collective, so a missing rank is reported
    return;
  }
  // Every rank contributes its buffer; only root's slice is kept. Bootstrap blobs are small,
  // so size * bytes through the hub is fine and keeps one primitive to bound and test.
  std::vector<uint8_t> gathered(bytes * size_t(size()));
  allgather(data, gathered.data(), bytes);
  if (rank() != root) std::memcpy(data, gathered.data() + size_t(root) * bytes, bytes);
}

void Bootstrap::barrier() {
  uint8_t token = 1;
  std::vector<uint8_t> gathered(static_cast<size_t>(size()));
  allgather(&token, gathered.data(), 1);
}

std::vector<std::string> Bootstrap::allgather_strings(const std::string& mine) {
  const size_t num_ranks = size_t(size());
  // Round 1: lengths, so round 2 can pad every string to the longest.
  uint64_t my_length = mine.size();
  std::vector<uint64_t> lengths(num_ranks);
  allgather(&my_length, lengths.data(), sizeof(uint64_t));
  uint64_t max_length = 0;
  for (uint64_t length : lengths) max_length = std::max(max_length, length);

  std::vector<std::string> out(num_ranks);
  if (max_length == 0) return out;
  std::vector<char> padded(max_length, '\0');
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::vector<char> gathered(max_length * num_ranks);
  allgather(padded.data(), gathered.data(), max_length);
  for (size_t r = 0; r < num_ranks; ++r) {
    out[r].assign(gathered.data() + r * max_length, lengths[r]);
  }
  return out;
}

namespace detail {
namespace {

class SingleRankBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  const char* kind() const override { return "single"; }
  void allgather(const void* send, void* recv, size_t bytes) override {
    TESSERA_CHECK_ARG((send != nullptr && recv != nullptr) || bytes == 0,
                      "Bootstrap::allgather: send = ", send, ", recv = ", recv,
                      " with bytes = ", bytes, ": expected buffers of `bytes` bytes");
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  }
};

}  // namespace

std::unique_ptr<Bootstrap> make_single_rank_bootstrap() {
  return std::make_unique<SingleRankBootstrap>();
}

}  // namespace detail

std::unique_ptr<Bootstrap> bootstrap_from_launch(const LaunchInfo& info) {
  TESSERA_CHECK_ARG(info.size >= 1, "bootstrap_from_launch: size = ", info.size, ": expected >= 1");
  TESSERA_CHECK_ARG(info.rank >= 0 && info.rank < info.size,
                    "bootstrap_from_launch: rank = ", info.rank, ": expected a rank in [0, ",
                    info.size, ")");
  TESSERA_CHECK_ARG(info.local_size >= 1 && info.local_size <= info.size,
                    "bootstrap_from_launch: local_size = ", info.local_size,
                    ": expected in [1, size = ", info.size, "]");
  TESSERA_CHECK_ARG(info.local_rank >= 0 && info.local_rank < info.local_size,
                    "bootstrap_from_launch: local_rank = ", info.local_rank,
                    ": expected in [0, local_size = ", info.local_size, ")");
  const std::string& source = info.source;
  if (source == "single") {
    TESSERA_CHECK_ARG(info.size == 1,
                      "bootstrap_from_launch: source 'single' with size = ", info.size,
                      ": expected size 1");
    return detail::make_single_rank_bootstrap();
  }
  if (source == "tessera-cli") {
    TESSERA_CHECK_ARG(!info.hub_address.empty(),
                      "bootstrap_from_launch: source 'tessera-cli' without hub_address: "
                      "expected host:port of the CLI's hub (TESSERA_BOOTSTRAP_ADDR)");
    return detail::make_tcp_bootstrap(info, /*host_hub=*/false);
  }
  if (info.size == 1) return detail::make_single_rank_bootstrap();
  if (source == "torchrun") {
    TESSERA_CHECK_ARG(!info.hub_address.empty(),
                      "bootstrap_from_launch: source 'torchrun' without hub_address: "
                      "expected MASTER_ADDR:MASTER_PORT");
    return detail::make_tcp_bootstrap(info, /*host_hub=*/info.rank == 0);
  }
  if (source == "mpi" || source == "slurm") {
#if defined(TESSERA_WITH_MPI)
    return detail::make_mpi_bootstrap(info);
#else
    TESSERA_CHECK(!info.hub_address.empty(), ErrorCode::kUnsupported, "launched by ", source,
                  " (rank ", info.rank, " of ", info.size,
                  ") but this Tessera was built without MPI: rebuild with MPI available to "
                  "CMake (find_package(MPI)), or set MASTER_ADDR and MASTER_PORT so the ranks "
                  "meet over tcp with rank 0 hosting the hub");
    return detail::make_tcp_bootstrap(info, /*host_hub=*/info.rank == 0);
#endif
  }
  throw_error(ErrorCode::kInvalidArgument,
              str("bootstrap_from_launch: source = '", source,
                  "': expected tessera-cli, torchrun, mpi, slurm or single"));
}

}  // namespace tessera
