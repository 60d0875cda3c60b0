// detect_launch(): where the launcher says this process is, read from the environment, in
// priority order:
//   tessera-cli  TESSERA_BOOTSTRAP_ADDR, TESSERA_RANK, TESSERA_WORLD_SIZE, TESSERA_LOCAL_RANK,
//                TESSERA_LOCAL_SIZE (all five, set by launch_local_workers)
//   torchrun     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//                (LOCAL_* default to RANK / WORLD_SIZE, i.e. one host, when absent)
//   mpi          OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (Open MPI), or PMI_RANK +
//                PMI_SIZE (MPICH/Hydra; local from MPI_LOCALRANKID/MPI_LOCALNRANKS), or
//                PMIX_RANK (size from SLURM_NTASKS)
//   slurm        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the local size from
//                SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE at SLURM_NODEID, else
//                SLURM_NTASKS / SLURM_NNODES when that divides
//   single       none of the above: rank 0 of 1
// mpi and slurm launches carry a tcp hub address when MASTER_ADDR and MASTER_PORT are set
// (the fallback when Tessera is built without MPI). Malformed values throw kInvalidArgument
// naming the variable and what was expected.
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "comm/bootstrap_internal.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace tessera {

namespace {

// torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) already listens on MASTER_PORT with
// its own store, so the hub cannot bind there; it takes the next port instead.
const Param<int64_t> kHubPortOffset(
    "TESSERA_HUB_PORT_OFFSET", -1,
    "tcp bootstrap hub port = MASTER_PORT + this under torchrun/mpi/slurm launches; -1: 1 when "
    "torchrun's agent holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True), else 0",
    -1, 65535);

std::optional<std::string> env_text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

bool env_set(const char* name) {
  return std::getenv(name) != nullptr;
}

int parse_int(const std::string& text, const std::string& name, const char* expected) {
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  bool ok = !text.empty() && end != nullptr && *end == '\0' && errno == 0 && value >= 0 &&
            value <= 0x7fffffff;
  TESSERA_CHECK_ARG(ok, name, " = '", text, "': expected ", expected);
  return int(value);
}

int require_int(const char* name, const char* source, const char* expected) {
  auto text = env_text(name);
  TESSERA_CHECK_ARG(text.has_value(), name, " is not set in a ", source, " launch: expected ",
                    expected);
  return parse_int(*text, name, expected);
}

constexpr const char* kRankExpected = "a non-negative integer (this process's rank)";
constexpr const char* kSizeExpected = "a positive integer (the number of ranks)";
constexpr const char* kLocalRankExpected =
    "a non-negative integer (this process's rank on its host)";
constexpr const char* kLocalSizeExpected = "a positive integer (the number of ranks on this host)";

// Names the variables each field came from, for messages.
struct VarNames {
  std::string rank, size, local_rank, local_size;
};

void check_ranges(const LaunchInfo& info, const VarNames& names) {
  TESSERA_CHECK_ARG(info.size >= 1, names.size, " = ", info.size, ": expected ", kSizeExpected);
  TESSERA_CHECK_ARG(info.rank < info.size, names.rank, " = ", info.rank, ": expected a rank below ",
                    names.size, " = ", info.size);
  TESSERA_CHECK_ARG(info.local_size >= 1 && info.local_size <= info.size, names.local_size, " = ",
                    info.local_size, ": expected a local size in [1, ", names.size, " = ",
                    info.size, "]");
  TESSERA_CHECK_ARG(info.local_rank < info.local_size, names.local_rank, " = ", info.local_rank,
                    ": expected a local rank below ", names.local_size, " = ", info.local_size);
}

std::string format_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return str("[", host, "]:", port);
  return str(host, ":", port);
}

// MASTER_ADDR:MASTER_PORT (+ the hub port offset), or "" when neither is set and not required.
std::string master_hub_address(const char* source, bool required) {
  auto addr = env_text("MASTER_ADDR");
  auto port_text = env_text("MASTER_PORT");
  if (!required && !addr && !port_text) return "";
  TESSERA_CHECK_ARG(addr.has_value() && !addr->empty(), "MASTER_ADDR is not set in a ", source,
                    " launch", port_text ? " (MASTER_PORT is)" : "",
                    ": expected the host name or address of rank 0");
  TESSERA_CHECK_ARG(port_text.has_value(), "MASTER_PORT is not set in a ", source,
                    " launch (MASTER_ADDR = '", *addr, "'): expected a tcp port in [1, 65535]");
  int port = parse_int(*port_text, "MASTER_PORT", "a tcp port in [1, 65535]");
  TESSERA_CHECK_ARG(port >= 1 && port <= 65535, "MASTER_PORT = '", *port_text,
                    "': expected a tcp port in [1, 65535]");
  int64_t offset = kHubPortOffset.get();
  if (offset < 0) offset = env_text("TORCHELASTIC_USE_AGENT_STORE") == "True" ? 1 : 0;
  TESSERA_CHECK_ARG(port + offset <= 65535, "TESSERA_HUB_PORT_OFFSET = ", offset,
                    " with MASTER_PORT = ", port, ": expected a hub port <= 65535");
  return format_host_port(*addr, int(port + offset));
}

// SLURM_TASKS_PER_NODE is "c1(xn1),c2,...": counts per node, run-length encoded.
std::optional<int> slurm_tasks_on_node(const std::string& text, int node_id) {
  int node = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int count = 0, repeat = 1;
    size_t paren = item.find("(x");
    std::string count_text = item.substr(0, paren);
    count = parse_int(count_text, "SLURM_TASKS_PER_NODE", "a list like '4(x2),3'");
    if (paren != std::string::npos) {
      TESSERA_CHECK_ARG(item.back() == ')', "SLURM_TASKS_PER_NODE = '", text,
                        "': expected a list like '4(x2),3'");
      repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), "SLURM_TASKS_PER_NODE",
                         "a list like '4(x2),3'");
    }
    if (node_id < node + repeat) return count;
    node += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return std::nullopt;
}

int slurm_local_size(int size) {
  if (auto per_node = env_text("SLURM_NTASKS_PER_NODE")) {
    return parse_int(*per_node, "SLURM_NTASKS_PER_NODE", kLocalSizeExpected);
  }
  auto tasks_per_node = env_text("SLURM_TASKS_PER_NODE");
  auto node_id_text = env_text("SLURM_NODEID");
  if (tasks_per_node && node_id_text) {
    int node_id = parse_int(*node_id_text, "SLURM_NODEID", "a non-negative integer (node index)");
    auto count = slurm_tasks_on_node(*tasks_per_node, node_id);
    TESSERA_CHECK_ARG(count.has_value(), "SLURM_TASKS_PER_NODE = '", *tasks_per_node,
                      "' has no entry for SLURM_NODEID = ", node_id,
                      ": expected a count for every node");
    return *count;
  }
  if (auto nodes_text = env_text("SLURM_NNODES")) {
    int nodes = parse_int(*nodes_text, "SLURM_NNODES", "a positive integer (number of nodes)");
    TESSERA_CHECK_ARG(nodes >= 1 && size % nodes == 0, "SLURM_NNODES = ", nodes,
                      " with SLURM_NTASKS = ", size,
                      ": expected a node count that divides the tasks (or set "
                      "SLURM_NTASKS_PER_NODE)");
    return size / nodes;
  }
  throw_error(ErrorCode::kInvalidArgument,
              "slurm launch without SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE + SLURM_NODEID "
              "or SLURM_NNODES: expected one of them to tell the ranks on this host");
}

LaunchInfo detect_tessera_cli() {
  LaunchInfo info;
  info.source = "tessera-cli";
  auto addr = env_text("TESSERA_BOOTSTRAP_ADDR");
  TESSERA_CHECK_ARG(addr.has_value(),
                    "TESSERA_RANK is set but TESSERA_BOOTSTRAP_ADDR is not: expected host:port "
                    "of the launcher's hub (both are set by launch_local_workers)");
  detail::parse_host_port(*addr, "TESSERA_BOOTSTRAP_ADDR");  // validates the form
  info.hub_address = *addr;
  info.rank = require_int("TESSERA_RANK", "tessera-cli", kRankExpected);
  info.size = require_int("TESSERA_WORLD_SIZE", "tessera-cli", kSizeExpected);
  info.local_rank = require_int("TESSERA_LOCAL_RANK", "tessera-cli", kLocalRankExpected);
  info.local_size = require_int("TESSERA_LOCAL_SIZE", "tessera-cli", kLocalSizeExpected);
  check_ranges(info,
               {"TESSERA_RANK", "TESSERA_WORLD_SIZE", "TESSERA_LOCAL_RANK", "TESSERA_LOCAL_SIZE"});
  return info;
}

LaunchInfo detect_torchrun() {
  LaunchInfo info;
  info.source = "torchrun";
  TESSERA_CHECK_ARG(env_set("WORLD_SIZE"),
                    "RANK is set but WORLD_SIZE is not: expected both in a torchrun launch");
  TESSERA_CHECK_ARG(env_set("RANK"),
                    "WORLD_SIZE is set but RANK is not: expected both in a torchrun launch");
  info.rank = require_int("RANK", "torchrun", kRankExpected);
  info.size = require_int("WORLD_SIZE", "torchrun", kSizeExpected);
  VarNames names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  if (env_set("LOCAL_RANK") || env_set("LOCAL_WORLD_SIZE")) {
    info.local_rank = require_int("LOCAL_RANK", "torchrun", kLocalRankExpected);
    info.local_size = require_int("LOCAL_WORLD_SIZE", "torchrun", kLocalSizeExpected);
  } else {
    info.local_rank = info.rank;  // one host
    info.local_size = info.size;
    names.local_rank = "LOCAL_RANK (unset: RANK)";
    names.local_size = "LOCAL_WORLD_SIZE (unset: WORLD_SIZE)";
  }
  check_ranges(info, names);
  info.hub_address = master_hub_address("torchrun", /*required=*/true);
  return info;
}

// Local rank/size under mpi launchers that may not say them: Hydra's, generic PMI, slurm's;
// else one host is assumed (an MPI build recomputes them from MPI_COMM_TYPE_SHARED).
void mpi_local(LaunchInfo& info, VarNames& names) {
  if (env_set("MPI_LOCALRANKID") || env_set("MPI_LOCALNRANKS")) {
    info.local_rank = require_int("MPI_LOCALRANKID", "mpi", kLocalRankExpected);
    info.local_size = require_int("MPI_LOCALNRANKS", "mpi", kLocalSizeExpected);
    names.local_rank = "MPI_LOCALRANKID";
    names.local_size = "MPI_LOCALNRANKS";
  } else if (env_set("PMI_LOCAL_RANK") || env_set("PMI_LOCAL_SIZE")) {
    info.local_rank = require_int("PMI_LOCAL_RANK", "mpi", kLocalRankExpected);
    info.local_size = require_int("PMI_LOCAL_SIZE", "mpi", kLocalSizeExpected);
    names.local_rank = "PMI_LOCAL_RANK";
    names.local_size = "PMI_LOCAL_SIZE";
  } else if (env_set("SLURM_LOCALID")) {
    info.local_rank = require_int("SLURM_LOCALID", "mpi", kLocalRankExpected);
    info.local_size = slurm_local_size(info.size);
    names.local_rank = "SLURM_LOCALID";
    names.local_size = "the slurm tasks on this node";
  } else {
    info.local_rank = info.rank;
    info.local_size = info.size;
    names.local_rank = names.rank + " (no local rank variable: one host assumed)";
    names.local_size = names.size + " (no local size variable: one host assumed)";
    TESSERA_LOG(kInfo, "mpi launch without a local rank variable: assuming one host");
  }
}

LaunchInfo detect_mpi() {
  LaunchInfo info;
  info.source = "mpi";
  VarNames names;
  if (env_set("OMPI_COMM_WORLD_RANK")) {
    info.rank = require_int("OMPI_COMM_WORLD_RANK", "mpi", kRankExpected);
    info.size = require_int("OMPI_COMM_WORLD_SIZE", "Open MPI", kSizeExpected);
    info.local_rank = require_int("OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI", kLocalRankExpected);
    info.local_size = require_int("OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI", kLocalSizeExpected);
    names = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE"};
  } else if (env_set("PMI_RANK")) {
    info.rank = require_int("PMI_RANK", "PMI (MPICH/Hydra)", kRankExpected);
    info.size = require_int("PMI_SIZE", "PMI (MPICH/Hydra)", kSizeExpected);
    names.rank = "PMI_RANK";
    names.size = "PMI_SIZE";
    mpi_local(info, names);
  } else {
    info.rank = require_int("PMIX_RANK", "PMIx", kRankExpected);
    TESSERA_CHECK_ARG(env_set("SLURM_NTASKS"),
                      "PMIX_RANK is set but no world size variable is (OMPI_COMM_WORLD_SIZE, "
                      "PMI_SIZE or SLURM_NTASKS): expected one of them");
    info.size = require_int("SLURM_NTASKS", "PMIx", kSizeExpected);
    names.rank = "PMIX_RANK";
    names.size = "SLURM_NTASKS";
    mpi_local(info, names);
  }
  check_ranges(info, names);
  info.hub_address = master_hub_address("mpi", /*required=*/false);
  return info;
}

LaunchInfo detect_slurm() {
  LaunchInfo info;
  info.source = "slurm";
  info.rank = require_int("SLURM_PROCID", "slurm", kRankExpected);
  info.size = require_int("SLURM_NTASKS", "slurm", kSizeExpected);
  info.local_rank = require_int("SLURM_LOCALID", "slurm", kLocalRankExpected);
  info.local_size = slurm_local_size(info.size);
  check_ranges(info,
               {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "the slurm tasks on this node"});
  info.hub_address = master_hub_address("slurm", /*required=*/false);
  return info;
}

}  // namespace

namespace detail {

HostPort parse_host_port(const std::string& text, const std::string& what) {
  constexpr const char* kExpected = "expected host:port or [ipv6]:port with port in [1, 65535]";
  HostPort out;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    TESSERA_CHECK_ARG(
        close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':', what,
        " = '", text, "': ", kExpected);
    out.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    TESSERA_CHECK_ARG(colon != std::string::npos && text.find(':') == colon, what, " = '", text,
                      "': ", kExpected);
    out.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  TESSERA_CHECK_ARG(!out.host.empty(), what, " = '", text, "': ", kExpected);
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  TESSERA_CHECK_ARG(!port_text.empty() && *end == '\0' && port >= 1 && port <= 65535, what, " = '",
                    text, "': ", kExpected);
  out.port = int(port);
  return out;
}

}  // namespace detail

LaunchInfo detect_launch() {
  if (env_set("TESSERA_BOOTSTRAP_ADDR") || env_set("TESSERA_RANK")) return detect_tessera_cli();
  if (env_set("RANK") || env_set("WORLD_SIZE")) return detect_torchrun();
  if (env_set("OMPI_COMM_WORLD_RANK") || env_set("PMI_RANK") || env_set("PMIX_RANK")) {
    return detect_mpi();
  }
  if (env_set("SLURM_PROCID")) return detect_slurm();
  return LaunchInfo{};
}

bool launched_as_worker() {
  for (const char* rank_variable :
       {"TESSERA_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (env_set(rank_variable)) return true;
  }
  return false;
}

}  // namespace tessera
