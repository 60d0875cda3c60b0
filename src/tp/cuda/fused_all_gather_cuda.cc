// Fused AllGather+GEMM across the GPUs of one machine (tp_backend.h), the Flux protocol on the
// symmetric heap:
//   1. this rank's rows into its own gather buffer on the caller's stream, then their signal
//      words (a copy within one GPU may run as a kernel: on the side stream it could wait for
//      a multiprocessor that the spinning GEMM holds);
//   2. the GEMM on every multiprocessor (on the context's rank_sms where set: loopback), each
//      row tile waiting for its chunks' words to reach this call's epoch (kernels/tp/),
//      visiting the local rows first; launched before step 4 is enqueued, so that the host's
//      time enqueueing the pushes (a few us per chunk) is not spent with the GPU idle;
//   3. after the GEMM, on the caller's stream: this rank's gather buffer released to every
//      sender (its word at each, released_signal, raised to the epoch by the stream);
//   4. on a side stream, the rows go to rank+1, rank+2, ... (so each rank receives from one
//      source at a time, rank-1 first: the plan's gather_order). Before the first chunk to a
//      peer the stream waits (cuStreamWaitValue64, no multiprocessor) until that peer released
//      the previous call's buffer: a wait per peer, off the GEMM's path, in place of a heap
//      barrier before the GEMM (14 to 34 us on 4 H200, docs/PERF.md). Then a chunk of comm_rows
//      by copy engine into the peer's `gathered`, then the chunk's signal word at the peer
//      written by the stream (after the copy: no multiprocessor, so the signals never queue
//      behind the GEMM that spins on them). A side stream per peer, all sending at once,
//      measured no faster (4 H200, docs/PERF.md);
//   5. the caller's stream joins the side stream.
// The release wait has no timeout of its own (the driver's waits have none); it is bounded all
// the same: the peer that does not release also sends nothing more, and this rank's GEMM of the
// same call times out waiting for its rows, naming it.
// Signal words hold the epoch of the call that last raised them, so nothing resets them; they
// are zeroed once, when the operation is made.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "comm/cuda/stream_memops.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"
#include "tp/cuda/ag_gemm_kernel.h"
#include "tp/cuda/peer_words.h"
#include "tp/tp_backend.h"

namespace tessera::tp::detail {

namespace {

class FusedAllGather final : public CudaTpRunner {
 public:
  FusedAllGather(RankContext& ctx, const TpPlan& plan, const SymmetricBuffer& gathered,
                 int signal_base)
      : ctx_(ctx),
        plan_(plan),
        gathered_(gathered),
        words_(ctx, signal_base, num_signal_slots(plan), "fused ag_gemm on cuda"),
        side_(Stream::create_cuda(ctx.device.index)),
        ready_(Event::create(side_)),
        sent_(Event::create(side_)) {
    const TpRequest& r = plan.request;
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount,
                                              ctx.device.index));
    if (ctx.options.rank_sms > 0) sms_ = std::min(sms_, ctx.options.rank_sms);
    kernel_.emplace(plan, ctx.rank, ctx.device, sms_);
    row_bytes_ = size_t(r.k) * dtype_size(r.dtype);
    for (int q = 0; q < r.world_size; ++q) peer_gathered_.push_back(words_.buffer(gathered_, q));
  }

  void run(const TensorView& a, const TensorView& b, const TensorView& bias, const TensorView& out,
           const Stream& stream) override {
    const TpRequest& r = plan_.request;
    const int p = r.world_size, rank = ctx_.rank;
    const uint64_t epoch = ++epoch_;
    const auto s = static_cast<cudaStream_t>(stream.cuda_stream());
    const RowRange mine = row_range(r.m, p, rank);
    phases_.start(s);
    ready_.record(stream);  // the pushes read only `a`
    if (mine.count > 0) {
      TESSERA_CUDA_CHECK(cudaMemcpyAsync(peer_gathered_[size_t(rank)] + size_t(mine.begin) * row_bytes_,
                                         a.data(), size_t(mine.count) * row_bytes_,
                                         cudaMemcpyDeviceToDevice, s));
      for (int64_t c = 0; c < num_chunks(plan_, rank); ++c) {
        cuda_comm::stream_write_value64(s, words_.word(rank, chunk_signal(plan_, rank, c)),
                                        epoch, "fused ag_gemm: this rank's arrival word");
      }
    }
    phases_.mark("local rows", s);
    // The GEMM first: its tiles of local rows start while the host still enqueues the pushes.
    kernel_->launch(gathered_.local, b.data(), bias.empty() ? nullptr : bias.data(), out.data(),
                    words_.word(rank, 0), epoch, wait_timeout_ms(), words_.heap().timeout_log(),
                    sms_, s);
    phases_.mark("gemm", s);
    words_.release_to_peers(s, released_signal(plan_, rank), epoch);
    ready_.wait_on(side_);
    const auto side = static_cast<cudaStream_t>(side_.cuda_stream());
    for (int i = 1; i < p; ++i) {
      const int q = (rank + i) % p;
      words_.wait_released(side, released_signal(plan_, q), epoch - 1);
      for (int64_t c = 0; c < num_chunks(plan_, rank); ++c) {
        const RowRange rows = chunk_rows(plan_, rank, c);
        TESSERA_CUDA_CHECK(cudaMemcpyAsync(
            peer_gathered_[size_t(q)] + size_t(rows.begin) * row_bytes_,
            static_cast<const std::byte*>(a.data()) + size_t(rows.begin - mine.begin) * row_bytes_,
            size_t(rows.count) * row_bytes_, cudaMemcpyDeviceToDevice, side));
        cuda_comm::stream_write_value64(side, words_.word(q, chunk_signal(plan_, rank, c)), epoch,
                                        "fused ag_gemm: a peer's arrival word");
      }
      phases_.mark("sent to", side, q);
    }
    sent_.record(side_);
    sent_.wait_on(stream);
  }

 private:
  RankContext& ctx_;
  TpPlan plan_;
  SymmetricBuffer gathered_;
  PeerWords words_;
  Stream side_;
  Event ready_, sent_;  // the side stream starts with the call; the caller's joins it
  int sms_ = 0;
  size_t row_bytes_ = 0;
  std::optional<AgGemmKernel> kernel_;
  std::vector<std::byte*> peer_gathered_;
  uint64_t epoch_ = 0;
};

}  // namespace

std::unique_ptr<CudaTpRunner> make_cuda_fused_all_gather(RankContext& ctx, const TpPlan& plan,
                                                         const SymmetricBuffer& gathered,
                                                         int signal_base) {
  return std::make_unique<FusedAllGather>(ctx, plan, gathered, signal_base);
}

}  // namespace tessera::tp::detail
