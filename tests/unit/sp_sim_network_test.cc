// FluidNetwork, the sim's link model: flows share each port max-min fairly and finish when
// their bytes have moved at the shared rates.
#include <gtest/gtest.h>

#include "sp/sim_network.h"
#include "tessera/core/error.h"

namespace tessera::sp::detail {
namespace {

constexpr double kInf = 1e30;

TEST(SimNetwork, OneFlowMovesAtItsPortOrItsCap) {
  FluidNetwork net;
  const int a = net.add_port(100.0), b = net.add_port(50.0);
  net.start(0.0, {a, b}, kInf, 1000.0, 7);
  EXPECT_DOUBLE_EQ(net.next_finish(), 20.0);  // the slower port: 1000 B at 50 B/us
  EXPECT_TRUE(net.finish_until(19.0).empty());
  EXPECT_EQ(net.finish_until(20.0), std::vector<int64_t>{7});
  EXPECT_TRUE(net.idle());
  net.start(30.0, {a}, 10.0, 1000.0, 8);  // its own cap binds
  EXPECT_DOUBLE_EQ(net.next_finish(), 130.0);
}

TEST(SimNetwork, FlowsShareAPortAndSpeedUpWhenOneLeaves) {
  FluidNetwork net;
  const int egress = net.add_port(100.0);
  const int in1 = net.add_port(1000.0), in2 = net.add_port(1000.0);
  net.start(0.0, {egress, in1}, kInf, 1000.0, 1);
  net.start(0.0, {egress, in2}, kInf, 3000.0, 2);
  // 50 B/us each until flow 1 is done at 20 us; flow 2 has 2000 B left, alone at 100 B/us.
  EXPECT_DOUBLE_EQ(net.next_finish(), 20.0);
  EXPECT_EQ(net.finish_until(20.0), std::vector<int64_t>{1});
  EXPECT_DOUBLE_EQ(net.next_finish(), 40.0);
  EXPECT_EQ(net.finish_until(40.0), std::vector<int64_t>{2});
}

TEST(SimNetwork, MaxMinFairShare) {
  // Port x (90) carries flows 1 and 2; port y (60) carries flows 2 and 3. Flow 2 is held to
  // 30 by y (shared with 3), so flow 1 takes the rest of x: 60.
  FluidNetwork net;
  const int x = net.add_port(90.0), y = net.add_port(60.0);
  net.start(0.0, {x}, kInf, 600.0, 1);
  net.start(0.0, {x, y}, kInf, 300.0, 2);
  net.start(0.0, {y}, kInf, 3000.0, 3);
  EXPECT_DOUBLE_EQ(net.next_finish(), 10.0);  // flows 1 (600/60) and 2 (300/30) together
  const std::vector<int64_t> done = net.finish_until(10.0);
  EXPECT_EQ(done.size(), 2u);
  // Flow 3 then runs alone at 60: 2700 B left.
  EXPECT_DOUBLE_EQ(net.next_finish(), 55.0);
}

TEST(SimNetwork, BadArgumentsAreNamed) {
  FluidNetwork net;
  EXPECT_THROW(net.add_port(0.0), Error);
  const int p = net.add_port(1.0);
  EXPECT_THROW(net.start(0.0, {p}, 1.0, 0.0, 0), Error);
  EXPECT_THROW(net.start(0.0, {p + 1}, 1.0, 1.0, 0), Error);
  net.start(5.0, {p}, 1.0, 1.0, 0);
  EXPECT_THROW(net.start(1.0, {p}, 1.0, 1.0, 1), Error);  // time went back
}

}  // namespace
}  // namespace tessera::sp::detail
