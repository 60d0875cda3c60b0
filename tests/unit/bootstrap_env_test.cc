// detect_launch() and launched_as_worker() under each launcher's environment, including
// malformed values, and bootstrap_from_launch() for launches that need no peer.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/comm/bootstrap.h"
#include "tessera/core/error.h"
#include "unit/bootstrap_test_util.h"

namespace tessera {
namespace {

using testing::ScopedLaunchEnv;

// Runs detect_launch() expecting kInvalidArgument whose message contains every `parts`.
void expect_invalid(const std::vector<std::string>& parts) {
  try {
    LaunchInfo info = detect_launch();
    ADD_FAILURE() << "detect_launch() returned source " << info.source << " rank " << info.rank;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "missing '" << part << "' in: " << e.what();
    }
  }
}

TEST(BootstrapDetect, NoLauncherIsSingle) {
  ScopedLaunchEnv env;
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "single");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.size, 1);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 1);
  EXPECT_TRUE(info.hub_address.empty());
  EXPECT_FALSE(launched_as_worker());
}

TEST(BootstrapDetect, TesseraCli) {
  ScopedLaunchEnv env;
  env.set("TESSERA_BOOTSTRAP_ADDR", "127.0.0.1:4567");
  env.set("TESSERA_RANK", "2");
  env.set("TESSERA_WORLD_SIZE", "4");
  env.set("TESSERA_LOCAL_RANK", "2");
  env.set("TESSERA_LOCAL_SIZE", "4");
  // Lower-priority launchers' variables are ignored.
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "8");
  env.set("SLURM_PROCID", "0");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "tessera-cli");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.hub_address, "127.0.0.1:4567");
  EXPECT_TRUE(launched_as_worker());
}

TEST(BootstrapDetect, TesseraCliMalformed) {
  ScopedLaunchEnv env;
  env.set("TESSERA_BOOTSTRAP_ADDR", "127.0.0.1:4567");
  env.set("TESSERA_RANK", "two");
  env.set("TESSERA_WORLD_SIZE", "4");
  env.set("TESSERA_LOCAL_RANK", "0");
  env.set("TESSERA_LOCAL_SIZE", "4");
  expect_invalid({"TESSERA_RANK = 'two'", "non-negative integer"});
  env.set("TESSERA_RANK", "4");
  expect_invalid({"TESSERA_RANK = 4", "below TESSERA_WORLD_SIZE = 4"});
  env.set("TESSERA_RANK", "1");
  env.set("TESSERA_LOCAL_SIZE", "5");
  expect_invalid({"TESSERA_LOCAL_SIZE = 5"});
  env.unset("TESSERA_LOCAL_SIZE");
  expect_invalid({"TESSERA_LOCAL_SIZE is not set"});
  env.set("TESSERA_LOCAL_SIZE", "4");
  env.set("TESSERA_BOOTSTRAP_ADDR", "localhost");
  expect_invalid({"TESSERA_BOOTSTRAP_ADDR = 'localhost'", "host:port"});
  env.set("TESSERA_BOOTSTRAP_ADDR", "localhost:99999");
  expect_invalid({"TESSERA_BOOTSTRAP_ADDR = 'localhost:99999'"});
  env.unset("TESSERA_BOOTSTRAP_ADDR");
  expect_invalid({"TESSERA_BOOTSTRAP_ADDR is not"});
}

TEST(BootstrapDetect, Torchrun) {
  ScopedLaunchEnv env;
  env.set("RANK", "3");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "3");
  env.set("LOCAL_WORLD_SIZE", "4");
  env.set("MASTER_ADDR", "10.1.2.3");
  env.set("MASTER_PORT", "29500");
  env.set("OMPI_COMM_WORLD_RANK", "0");  // lower priority
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.size, 8);
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.hub_address, "10.1.2.3:29500");
  EXPECT_TRUE(launched_as_worker());

  // torchrun's agent holds MASTER_PORT itself: the hub takes the next port unless told.
  env.set("TORCHELASTIC_USE_AGENT_STORE", "True");
  EXPECT_EQ(detect_launch().hub_address, "10.1.2.3:29501");
  env.set("TESSERA_HUB_PORT_OFFSET", "0");
  EXPECT_EQ(detect_launch().hub_address, "10.1.2.3:29500");
  env.unset("TORCHELASTIC_USE_AGENT_STORE");
  env.unset("TESSERA_HUB_PORT_OFFSET");

  env.set("MASTER_ADDR", "::1");
  EXPECT_EQ(detect_launch().hub_address, "[::1]:29500");
  env.set("MASTER_ADDR", "10.1.2.3");

  // Without LOCAL_*: one host.
  env.unset("LOCAL_RANK");
  env.unset("LOCAL_WORLD_SIZE");
  info = detect_launch();
  EXPECT_EQ(info.local_rank, 3);
  EXPECT_EQ(info.local_size, 8);
}

TEST(BootstrapDetect, TorchrunMalformed) {
  ScopedLaunchEnv env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("LOCAL_RANK", "1");
  env.set("LOCAL_WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  expect_invalid({"MASTER_PORT is not set", "torchrun"});
  env.set("MASTER_PORT", "http");
  expect_invalid({"MASTER_PORT = 'http'", "tcp port"});
  env.set("MASTER_PORT", "70000");
  expect_invalid({"MASTER_PORT = '70000'"});
  env.set("MASTER_PORT", "29500");
  env.set("RANK", "2");
  expect_invalid({"RANK = 2", "below WORLD_SIZE = 2"});
  env.set("RANK", "-1");
  expect_invalid({"RANK = '-1'"});
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "0");
  expect_invalid({"WORLD_SIZE = 0", "positive integer"});
  env.unset("WORLD_SIZE");
  expect_invalid({"WORLD_SIZE is not"});
  env.set("WORLD_SIZE", "2");
  env.unset("MASTER_ADDR");
  expect_invalid({"MASTER_ADDR is not set"});
}

TEST(BootstrapDetect, OpenMpi) {
  ScopedLaunchEnv env;
  env.set("OMPI_COMM_WORLD_RANK", "5");
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  env.set("SLURM_PROCID", "0");  // lower priority
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "mpi");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_TRUE(info.hub_address.empty());
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29400");
  EXPECT_EQ(detect_launch().hub_address, "node0:29400");
  env.unset("MASTER_ADDR");
  expect_invalid({"MASTER_ADDR is not set", "MASTER_PORT is"});
  env.unset("MASTER_PORT");

  env.set("OMPI_COMM_WORLD_SIZE", "x8");
  expect_invalid({"OMPI_COMM_WORLD_SIZE = 'x8'"});
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "4");
  expect_invalid({"OMPI_COMM_WORLD_LOCAL_RANK = 4", "OMPI_COMM_WORLD_LOCAL_SIZE = 4"});
}

TEST(BootstrapDetect, MpichHydraAndPmix) {
  ScopedLaunchEnv env;
  env.set("PMI_RANK", "2");
  env.set("PMI_SIZE", "4");
  env.set("MPI_LOCALRANKID", "0");
  env.set("MPI_LOCALNRANKS", "2");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "mpi");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.local_rank, 0);
  EXPECT_EQ(info.local_size, 2);
  env.unset("PMI_SIZE");
  expect_invalid({"PMI_SIZE is not set"});

  ScopedLaunchEnv pmix;
  pmix.set("PMIX_RANK", "1");
  pmix.set("SLURM_NTASKS", "2");
  pmix.set("SLURM_LOCALID", "1");
  pmix.set("SLURM_NTASKS_PER_NODE", "2");
  info = detect_launch();
  EXPECT_EQ(info.source, "mpi");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.size, 2);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 2);
  EXPECT_TRUE(launched_as_worker());
  pmix.unset("SLURM_NTASKS");
  expect_invalid({"PMIX_RANK is set but no world size"});
}

TEST(BootstrapDetect, Slurm) {
  ScopedLaunchEnv env;
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "7");
  env.set("SLURM_LOCALID", "1");
  env.set("SLURM_NODEID", "1");
  env.set("SLURM_TASKS_PER_NODE", "4,3");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.size, 7);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 3);
  EXPECT_TRUE(launched_as_worker());

  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_TASKS_PER_NODE", "2(x3),2");
  env.set("SLURM_NODEID", "3");
  EXPECT_EQ(detect_launch().local_size, 2);
  env.set("SLURM_NTASKS_PER_NODE", "4");  // wins over SLURM_TASKS_PER_NODE
  EXPECT_EQ(detect_launch().local_size, 4);
  env.unset("SLURM_NTASKS_PER_NODE");
  env.unset("SLURM_TASKS_PER_NODE");
  env.set("SLURM_NNODES", "2");
  EXPECT_EQ(detect_launch().local_size, 4);
  env.set("SLURM_NNODES", "3");
  expect_invalid({"SLURM_NNODES = 3", "SLURM_NTASKS = 8"});
  env.unset("SLURM_NNODES");
  expect_invalid({"SLURM_NTASKS_PER_NODE"});
  env.set("SLURM_NTASKS_PER_NODE", "4");
  env.set("SLURM_PROCID", "8");
  expect_invalid({"SLURM_PROCID = 8", "below SLURM_NTASKS = 8"});
  env.set("SLURM_PROCID", "1");
  env.unset("SLURM_LOCALID");
  expect_invalid({"SLURM_LOCALID is not set"});
}

TEST(BootstrapDetect, SingleRankBootstrap) {
  ScopedLaunchEnv env;
  auto bootstrap = bootstrap_from_launch(detect_launch());
  EXPECT_STREQ(bootstrap->kind(), "single");
  EXPECT_EQ(bootstrap->rank(), 0);
  EXPECT_EQ(bootstrap->size(), 1);
  uint64_t mine = 0x1234, gathered = 0;
  bootstrap->allgather(&mine, &gathered, sizeof(mine));
  EXPECT_EQ(gathered, mine);
  bootstrap->broadcast(&mine, sizeof(mine), 0);
  EXPECT_EQ(mine, 0x1234u);
  bootstrap->barrier();
  EXPECT_EQ(bootstrap->allgather_strings("host-a"), std::vector<std::string>{"host-a"});
  EXPECT_THROW(bootstrap->broadcast(&mine, sizeof(mine), 1), Error);

  // A one-rank torchrun launch needs no hub either.
  LaunchInfo torchrun;
  torchrun.source = "torchrun";
  torchrun.hub_address = "127.0.0.1:1";
  EXPECT_STREQ(bootstrap_from_launch(torchrun)->kind(), "single");
}

TEST(BootstrapDetect, FromLaunchValidates) {
  LaunchInfo info;
  info.size = 2;
  info.rank = 2;
  EXPECT_THROW(bootstrap_from_launch(info), Error);
  info.rank = 0;
  info.source = "pbs";
  try {
    bootstrap_from_launch(info);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("source = 'pbs'"), std::string::npos) << e.what();
  }
}

TEST(BootstrapDetect, MpiLaunchWithoutMpiBuild) {
  // With MPI linked into the process the mpi bootstrap would be used instead.
  if (dlsym(RTLD_DEFAULT, "MPI_Init") != nullptr) GTEST_SKIP() << "built with MPI";
  LaunchInfo info;
  info.source = "mpi";
  info.rank = 1;
  info.size = 2;
  info.local_size = 2;
  info.local_rank = 1;
  try {
    bootstrap_from_launch(info);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MPI"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
