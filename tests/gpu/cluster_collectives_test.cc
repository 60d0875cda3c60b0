// GPU tests of the cluster collectives (kernels/cluster/cluster_collectives.cuh) over DSMEM (with
// cluster barriers, and the push form up to 4 KB) and over global memory: ClusterReduce (sum, max;
// f32, bf16, f16 with f32 accumulation) and ClusterGather must equal, bit for bit, a host
// computation in the same order (ranks 0..N-1, f32, one rounding at the end), on every CTA of every
// cluster, for cluster sizes 1, 2, 3, 4, 8 and 16 and messages of 4 bytes to 64 KB; the same inputs
// give the same bits every run.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cluster/collective_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/dtype.h"
#include "tessera/runtime/memory.h"
#include "tessera/runtime/stream.h"

namespace tessera::cluster {
namespace {

DType dtype_of(CollectiveElement e) {
  return e == CollectiveElement::kF32 ? DType::kF32
                                      : (e == CollectiveElement::kBF16 ? DType::kBF16 : DType::kF16);
}

class ClusterCollectivesGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    stream_ = Stream::create_cuda(0);
  }

  // Runs one launch and checks every CTA's buffer against the host computation.
  void check(CollectiveOp op, CollectivePath path, CollectiveElement element, int n, int count,
             int iters = 1) {
    const int clusters = 3;
    const DType dt = dtype_of(element);
    const size_t esize = dtype_size(dt);
    CollectiveLaunch l{op, path, element, n, count, clusters, iters};
    if (!collective_unlaunchable_reason(l).empty()) GTEST_SKIP() << collective_unlaunchable_reason(l);
    const int64_t in_elems = int64_t(clusters) * n * count;
    const int64_t buf_elems = int64_t(collective_buffer_bytes(l) / esize);
    std::vector<unsigned char> in(in_elems * esize), out(clusters * n * buf_elems * esize);
    std::mt19937 rng(1234 + n * 7 + count);
    std::uniform_real_distribution<float> dist(-4.f, 4.f);
    for (int64_t i = 0; i < in_elems; ++i) store_from_float(in.data(), dt, i, dist(rng));
    Tensor d_in = Tensor::empty({int64_t(in.size())}, DType::kU8, Device::cuda(0));
    Tensor d_out = Tensor::empty({int64_t(out.size())}, DType::kU8, Device::cuda(0));
    Tensor scratch = Tensor::empty({int64_t(std::max<size_t>(16, collective_scratch_bytes(l)))},
                                   DType::kU8, Device::cuda(0));
    copy_bytes(d_in.data(), in.data(), in.size(), stream_);
    fill_bytes(d_out.data(), 0xFF, out.size(), stream_);
    l.in = d_in.data();
    l.out = d_out.data();
    l.global_scratch = scratch.data();
    launch_collective(l, stream_.cuda_stream());
    copy_bytes(out.data(), d_out.data(), out.size(), stream_);
    stream_.synchronize();

    for (int c = 0; c < clusters; ++c) {
      std::vector<float> expect;
      if (op == CollectiveOp::kGather) {
        for (int r = 0; r < n; ++r)
          for (int i = 0; i < count; ++i)
            expect.push_back(load_as_float(in.data(), dt, (int64_t(c) * n + r) * count + i));
      } else {
        for (int i = 0; i < count; ++i) {
          float acc = load_as_float(in.data(), dt, int64_t(c) * n * count + i);
          for (int r = 1; r < n; ++r) {
            const float v = load_as_float(in.data(), dt, (int64_t(c) * n + r) * count + i);
            acc = op == CollectiveOp::kReduceSum ? acc + v : std::max(acc, v);
          }
          expect.push_back(acc);
        }
      }
      // Round the f32 result once, as the device does, and compare the stored bits.
      std::vector<unsigned char> expect_bits(expect.size() * esize);
      for (size_t i = 0; i < expect.size(); ++i)
        store_from_float(expect_bits.data(), dt, int64_t(i), expect[i]);
      for (int r = 0; r < n; ++r) {
        const unsigned char* got = out.data() + (int64_t(c) * n + r) * buf_elems * esize;
        ASSERT_EQ(0, std::memcmp(got, expect_bits.data(), expect_bits.size()))
            << "cluster " << c << " rank " << r << " of " << n << ", " << count
            << " elements, iters " << iters;
      }
    }
  }

  Stream stream_;
};

constexpr int kSizes[] = {1, 2, 3, 4, 8, 16};

TEST_F(ClusterCollectivesGpu, ReduceIsExactForEverySizeAndMessage) {
  for (int n : kSizes)
    for (int bytes : {4, 64, 1000, 1024, 4096, 16384, 65536})
      for (auto e : {CollectiveElement::kF32, CollectiveElement::kBF16, CollectiveElement::kF16}) {
        const int count = std::max<int>(1, bytes / int(collective_element_bytes(e)));
        check(CollectiveOp::kReduceSum, CollectivePath::kDsmem, e, n, count);
        check(CollectiveOp::kReduceMax, CollectivePath::kDsmem, e, n, count);
      }
}

// The push form: the same bits as the barrier form's order, once and 50 times in a row on one
// buffer (its two receive areas alternate; a call must not overwrite a slot a peer still reads).
TEST_F(ClusterCollectivesGpu, PushReduceIsExactForEverySizeAndRepeated) {
  for (int n : kSizes)
    for (int bytes : {4, 64, 1000, 1024, 4096})
      for (auto e : {CollectiveElement::kF32, CollectiveElement::kBF16, CollectiveElement::kF16}) {
        const int count = std::max<int>(1, bytes / int(collective_element_bytes(e)));
        check(CollectiveOp::kReduceSum, CollectivePath::kDsmemPush, e, n, count);
        check(CollectiveOp::kReduceMax, CollectivePath::kDsmemPush, e, n, count);
        check(CollectiveOp::kReduceSum, CollectivePath::kDsmemPush, e, n, count, 50);
      }
}

TEST_F(ClusterCollectivesGpu, GatherIsExactForEverySizeAndMessage) {
  for (int n : kSizes)
    for (int bytes : {4, 64, 1000, 4096, 65536}) {
      const int count = std::max(1, bytes / 4 / n);  // the gathered message is `bytes`
      check(CollectiveOp::kGather, CollectivePath::kDsmem, CollectiveElement::kF32, n, count);
      check(CollectiveOp::kGather, CollectivePath::kDsmem, CollectiveElement::kBF16, n,
            std::max(1, bytes / 2 / n));
    }
}

TEST_F(ClusterCollectivesGpu, GlobalMemoryPathMatches) {
  for (int n : {2, 4, 16}) {
    check(CollectiveOp::kReduceSum, CollectivePath::kGlobal, CollectiveElement::kF32, n, 256);
    check(CollectiveOp::kGather, CollectivePath::kGlobal, CollectiveElement::kF32, n, 64);
  }
}

TEST_F(ClusterCollectivesGpu, RepeatedCollectivesOnOneBufferStayExact) {
  for (int n : {2, 3, 4, 8})
    check(CollectiveOp::kReduceSum, CollectivePath::kDsmem, CollectiveElement::kF32, n, 4096, 50);
}

TEST_F(ClusterCollectivesGpu, OversizedMessageIsRefused) {
  CollectiveLaunch l{CollectiveOp::kGather, CollectivePath::kDsmem, CollectiveElement::kF32, 16,
                     16384, 1, 1};
  EXPECT_NE(collective_unlaunchable_reason(l).find("shared memory"), std::string::npos);
  l.cluster_size = 17;
  EXPECT_NE(collective_unlaunchable_reason(l).find("expected 1 to 16"), std::string::npos);
  l.cluster_size = 4;
  l.count = 16;
  l.path = CollectivePath::kDsmemPush;
  EXPECT_NE(collective_unlaunchable_reason(l).find("the push form reduces only"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::cluster
