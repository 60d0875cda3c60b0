// Bootstrap: the launcher's channel between ranks before any GPU communicator exists. It
// carries small blobs (NCCL and NVSHMEM unique ids, host names, IPC handles) and gives a
// bounded barrier. Implementations:
//   - tcp:    a star over TCP. The `tessera` CLI's parent process is the hub for the
//             workers it starts (TESSERA_BOOTSTRAP_ADDR); under torchrun-style variables
//             (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) rank 0 hosts it.
//   - mpi:    MPI_Allgather when running under mpirun/srun and built with MPI.
//   - thread: ranks are threads of one process (the cpu backend).
// Every blocking call is bounded by the wait timeout and names the ranks that did not arrive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank within this host and ranks on this host, as the launcher says.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual const char* kind() const = 0;  // "tcp", "mpi", "thread"

  // recv[r * bytes .. (r+1) * bytes) = rank r's `send` for every r. Collective.
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;

  // Built on allgather.
  void broadcast(void* data, size_t bytes, int root);
  void barrier();
  std::vector<std::string> allgather_strings(const std::string& mine);
};

// Where the launcher said we are, read from the environment. `source` is "tessera-cli",
// "torchrun", "mpi", "slurm" or "single" (no launcher: one rank).
struct LaunchInfo {
  std::string source = "single";
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string hub_address;  // host:port for tcp (empty for mpi/single)
};
LaunchInfo detect_launch();

// Connects to the channel the launcher provides (tcp, mpi, or a one-rank channel).
std::unique_ptr<Bootstrap> bootstrap_from_launch(const LaunchInfo& info);

// The hub side of the tcp bootstrap, run by the CLI parent: accepts `size` workers and
// relays their allgathers until they disconnect. Listens on 127.0.0.1 on a free port.
class TcpBootstrapHub {
 public:
  explicit TcpBootstrapHub(int size);
  ~TcpBootstrapHub();
  std::string address() const;  // "127.0.0.1:PORT"
  // Serves until every worker disconnected; throws on protocol errors or timeout.
  void serve();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera

namespace tessera {

// Single-host launcher used by the `tessera` CLI and the multi-GPU test binaries: re-executes
// this program (argv) as `num_workers` worker processes with the tcp bootstrap's variables
// set (TESSERA_BOOTSTRAP_ADDR, TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_LOCAL_RANK,
// TESSERA_LOCAL_SIZE) plus `extra_env`, serves the hub, and waits. A worker that exits
// non-zero or dies makes the launcher stop the others after the wait timeout. Returns 0 when
// every worker exited 0, else the first non-zero exit status.
int launch_local_workers(int num_workers, int argc, char** argv,
                         const std::vector<std::pair<std::string, std::string>>& extra_env = {});
// True in a process started by launch_local_workers (or by any launcher that set a rank).
bool launched_as_worker();

}  // namespace tessera
