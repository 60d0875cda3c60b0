// Internal pieces of the bootstrap shared by bootstrap.cc (dispatch), bootstrap_env.cc
// (launch detection), bootstrap_tcp.cc (the tcp star), bootstrap_mpi.cc and launcher.cc.
// Not installed; nothing here is public API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/comm/bootstrap.h"

namespace tessera::detail {

// "host:port" (or "[v6addr]:port") split into its parts. Throws kInvalidArgument naming
// `what` (the variable or argument the text came from) when the form is wrong.
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort parse_host_port(const std::string& text, const std::string& what);

// The tcp hub: accepts `size` ranks, then relays allgather rounds until every rank left.
// One thread calls serve(); request_stop() may be called from any thread.
class TcpHubServer {
 public:
  // Listens on bind_host:port (port 0: a free port). bind_host "" listens on every interface.
  TcpHubServer(int size, const std::string& bind_host, int port);
  ~TcpHubServer();
  TcpHubServer(const TcpHubServer&) = delete;
  TcpHubServer& operator=(const TcpHubServer&) = delete;

  int port() const;
  // Serves until every rank connected and left (returns), or a protocol error or timeout
  // (every connected rank is sent the error, then it is thrown), or request_stop() (returns).
  void serve();
  void request_stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A tcp client of the hub at info.hub_address. With `host_hub`, this process first starts
// the hub on that address's port in a background thread (rank 0 under torchrun or an
// mpi/slurm launch without MPI) and stops it when the bootstrap is destroyed.
std::unique_ptr<Bootstrap> make_tcp_bootstrap(const LaunchInfo& info, bool host_hub);

// One rank: allgather copies.
std::unique_ptr<Bootstrap> make_single_rank_bootstrap();

#if defined(TESSERA_WITH_MPI)
// MPI_Iallgather over a duplicate of MPI_COMM_WORLD; initializes MPI when nobody did.
std::unique_ptr<Bootstrap> make_mpi_bootstrap(const LaunchInfo& info);
#endif

}  // namespace tessera::detail
