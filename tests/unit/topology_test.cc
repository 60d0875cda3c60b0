// Topology: link classes, cross-machine link presets, the cpu topology, regrouping one host
// into emulated machines, and the emulation helpers (NCCL host ids, paced transfer time).
#include <gtest/gtest.h>

#include <string>

#include "tessera/comm/emulation.h"
#include "tessera/comm/topology.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// A single host of `n` GPUs all joined by NVLink.
Topology nvlink_host(int n) {
  Topology t;
  t.world_size = n;
  t.machine_of_rank.assign(n, 0);
  t.local_rank.resize(n);
  t.host_name.assign(n, "gpu-host");
  t.device_of_rank.resize(n);
  t.links.assign(n * n, LinkClass::kNVLink);
  for (int r = 0; r < n; ++r) {
    t.local_rank[r] = r;
    t.device_of_rank[r] = r;
    t.links[r * n + r] = LinkClass::kSelf;
  }
  return t;
}

TEST(Topology, LinkClassNamesAndCrossMachine) {
  EXPECT_STREQ(link_class_name(LinkClass::kSelf), "self");
  EXPECT_STREQ(link_class_name(LinkClass::kNVLink), "nvlink");
  EXPECT_STREQ(link_class_name(LinkClass::kPCIe), "pcie");
  EXPECT_STREQ(link_class_name(LinkClass::kNetwork), "network");
  EXPECT_STREQ(link_class_name(LinkClass::kEmulatedNetwork), "emulated-network");
  EXPECT_FALSE(is_cross_machine(LinkClass::kSelf));
  EXPECT_FALSE(is_cross_machine(LinkClass::kNVLink));
  EXPECT_FALSE(is_cross_machine(LinkClass::kPCIe));
  EXPECT_TRUE(is_cross_machine(LinkClass::kNetwork));
  EXPECT_TRUE(is_cross_machine(LinkClass::kEmulatedNetwork));
}

TEST(Topology, LinkPresets) {
  LinkSpec nic = link_preset("nic400");
  EXPECT_DOUBLE_EQ(nic.bandwidth_gbps, 50.0);
  EXPECT_DOUBLE_EQ(nic.latency_us, 5.0);
  EXPECT_EQ(nic.preset, "nic400");
  LinkSpec paper = link_preset("paper");
  // 400 Gb/s / 8 GPUs = 6.25 GB/s, scaled by A100/H200 attention speed 190/620.
  EXPECT_NEAR(paper.bandwidth_gbps, 6.25 * 190.0 / 620.0, 1e-12);
  EXPECT_NEAR(paper.bandwidth_gbps, 1.9, 0.05);
  EXPECT_DOUBLE_EQ(paper.latency_us, 15.0);
  EXPECT_EQ(paper.preset, "paper");
  std::string m = error_of([] { link_preset("infiniband"); });
  EXPECT_NE(m.find("'infiniband'"), std::string::npos) << m;
  EXPECT_NE(m.find("nic400, paper"), std::string::npos) << m;
}

TEST(Topology, CpuTopologySplitsRanksEvenly) {
  Topology t = cpu_topology(8, 2);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.num_machines(), 2);
  EXPECT_TRUE(t.emulated);
  EXPECT_TRUE(t.is_regular());
  EXPECT_EQ(t.ranks_on_machine(1), (std::vector<int>{4, 5, 6, 7}));
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(t.machine_of_rank[r], r / 4);
    EXPECT_EQ(t.local_rank[r], r % 4);
    EXPECT_EQ(t.device_of_rank[r], -1);
    EXPECT_FALSE(t.host_name[r].empty());
  }
  EXPECT_EQ(t.link(3, 3), LinkClass::kSelf);
  EXPECT_EQ(t.link(0, 3), LinkClass::kPCIe);
  EXPECT_EQ(t.link(3, 4), LinkClass::kEmulatedNetwork);
  EXPECT_EQ(t.link(7, 0), LinkClass::kEmulatedNetwork);
  const std::string s = t.to_string();
  EXPECT_NE(s.find("8 ranks on 2 emulated machines"), std::string::npos) << s;
  EXPECT_NE(s.find("machine 1: 4 5 6 7"), std::string::npos) << s;
  EXPECT_NE(s.find("links pcie"), std::string::npos) << s;

  Topology one = cpu_topology(3, 1);
  EXPECT_FALSE(one.emulated);
  EXPECT_EQ(one.num_machines(), 1);
  EXPECT_EQ(one.link(0, 2), LinkClass::kPCIe);

  EXPECT_NE(error_of([] { cpu_topology(6, 4); }).find("num_machines = 4"), std::string::npos);
  EXPECT_NE(error_of([] { cpu_topology(0, 1); }).find("world_size = 0"), std::string::npos);
  EXPECT_NE(error_of([] { cpu_topology(4, 0); }).find("num_machines = 0"), std::string::npos);
  EXPECT_NE(error_of([&] { t.ranks_on_machine(2); }).find("machine = 2"), std::string::npos);
}

TEST(Topology, EmulateMachinesKeepsRealLinksInsideGroups) {
  Topology real = nvlink_host(4);
  EXPECT_FALSE(real.emulated);
  Topology t = emulate_machines(real, 2, link_preset("paper"));
  EXPECT_TRUE(t.emulated);
  EXPECT_EQ(t.num_machines(), 2);
  EXPECT_EQ(t.cross_link.preset, "paper");
  EXPECT_EQ(t.machine_of_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(t.local_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(t.device_of_rank, real.device_of_rank);
  EXPECT_EQ(t.link(0, 1), LinkClass::kNVLink);
  EXPECT_EQ(t.link(2, 3), LinkClass::kNVLink);
  EXPECT_EQ(t.link(1, 2), LinkClass::kEmulatedNetwork);
  EXPECT_EQ(t.link(3, 0), LinkClass::kEmulatedNetwork);
  EXPECT_EQ(t.link(2, 2), LinkClass::kSelf);
  const std::string s = t.to_string();
  EXPECT_NE(s.find("cross-machine link paper"), std::string::npos) << s;
  EXPECT_NE(s.find("devices 2 3"), std::string::npos) << s;
  EXPECT_NE(s.find("links nvlink"), std::string::npos) << s;

  // One machine: nothing changes but the link it would use.
  Topology same = emulate_machines(real, 1, link_preset("nic400"));
  EXPECT_FALSE(same.emulated);
  EXPECT_EQ(same.links, real.links);

  EXPECT_NE(error_of([&] { emulate_machines(real, 3, LinkSpec{}); }).find("num_machines = 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { emulate_machines(real, 0, LinkSpec{}); }).find("num_machines = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { emulate_machines(t, 2, LinkSpec{}); }).find("single host"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              emulate_machines(real, 2, LinkSpec{0.0, 1.0, "custom"});
            }).find("bandwidth = 0"),
            std::string::npos);
}

TEST(Topology, IrregularMachines) {
  Topology t = cpu_topology(3, 1);
  t.machine_of_rank = {0, 0, 1};
  EXPECT_EQ(t.num_machines(), 2);
  EXPECT_FALSE(t.is_regular());
  EXPECT_EQ(t.ranks_on_machine(0), (std::vector<int>{0, 1}));
}

TEST(Emulation, HostIdsAndPacedTransferTime) {
  Topology real = nvlink_host(4);
  EXPECT_EQ(emulated_host_id(real, 3), "");
  Topology t = emulate_machines(real, 4, link_preset("nic400"));
  EXPECT_EQ(emulated_host_id(t, 0), "tessera-emulated-machine-0");
  EXPECT_EQ(emulated_host_id(t, 3), "tessera-emulated-machine-3");
  EXPECT_NE(error_of([&] { emulated_host_id(t, 4); }).find("rank = 4"), std::string::npos);

  // 50 GB/s = 50e3 bytes per us: 1 MB (1e6 bytes) takes 20 us plus 5 us latency.
  EXPECT_DOUBLE_EQ(paced_transfer_us(link_preset("nic400"), 1000000), 25.0);
  EXPECT_DOUBLE_EQ(paced_transfer_us(link_preset("nic400"), 0), 5.0);
  LinkSpec paper = link_preset("paper");
  EXPECT_NEAR(paced_transfer_us(paper, 1 << 20), 15.0 + (1 << 20) / (paper.bandwidth_gbps * 1e3),
              1e-9);
  EXPECT_NE(error_of([] {
              paced_transfer_us(LinkSpec{-1.0, 1.0, "custom"}, 10);
            }).find("bandwidth = -1"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
