// `tessera bench comm`: nccl-tests-style sweep of Tessera's communication operations.
//
// For every operation and size: fill inputs that encode (rank, index), run warm-up and timed
// iterations (an event pair around each; median per rank, slowest rank reported), then check
// every output element (#wrong). Sizes follow nccl-tests: the size of each rank's larger
// buffer (all_gather: the gathered output; reduce_scatter: the input; all_to_all: the input;
// point-to-point and one-sided: the bytes one rank sends). algbw = size / time;
// busbw = algbw * (n-1)/n for all_to_all, all_gather and reduce_scatter, = algbw otherwise.
//
// Point-to-point and one-sided operations run in a ring over two patterns: "intra" (to the
// next rank of the same machine) and "cross" (to the same local rank of the next machine),
// so on emulated machines the cross-machine figures sit next to the intra-machine ones.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"

namespace tessera::cli {
namespace {

int32_t encode(int rank, int64_t index) {
  return int32_t((uint32_t(rank) << 26) ^ (uint32_t(index) * 2654435761u));
}
// Small values so a sum over ranks stays exact in int32.
int32_t encode_summand(int rank, int64_t index) { return (rank + 1) * int32_t(index % 1000 + 1); }

struct Ring {
  int to = -1;
  int from = -1;
};

// Ring inside this rank's machine, or across machines at the same local index.
Ring ring_for(const Topology& t, int rank, bool cross) {
  int machine = t.machine_of_rank[size_t(rank)];
  int local = t.local_rank[size_t(rank)];
  Ring r;
  if (!cross) {
    auto members = t.ranks_on_machine(machine);
    int m = int(members.size());
    if (m < 2) return r;
    r.to = members[size_t((local + 1) % m)];
    r.from = members[size_t((local + m - 1) % m)];
    return r;
  }
  int machines = t.num_machines();
  if (machines < 2) return r;
  auto next = t.ranks_on_machine((machine + 1) % machines);
  auto prev = t.ranks_on_machine((machine + machines - 1) % machines);
  if (size_t(local) >= next.size() || size_t(local) >= prev.size()) return r;
  r.to = next[size_t(local)];
  r.from = prev[size_t(local)];
  return r;
}

struct OpResult {
  std::string op, impl, pattern, link;
  size_t bytes = 0;
  double median_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = 0;
};

// One measured case: buffers set up by the caller, `enqueue` issues one iteration, `verify`
// counts wrong elements on this rank after the timed iterations.
struct Case {
  std::function<void()> enqueue;
  std::function<int64_t()> verify;
  std::function<void()> settle;  // after iterations, before verify (e.g. a heap barrier)
};

void upload(const Tensor& t, const std::vector<int32_t>& host, const Stream& s) {
  copy_bytes(t.data(), host.data(), host.size() * sizeof(int32_t), s);
  s.synchronize();
}

std::vector<int32_t> download(const void* src, size_t elements, const Stream& s) {
  std::vector<int32_t> host(elements);
  copy_bytes(host.data(), src, elements * sizeof(int32_t), s);
  s.synchronize();
  return host;
}

class CommBench {
 public:
  CommBench(RankContext& ctx, const Options& opt) : ctx_(ctx), opt_(opt) {}

  // A second heap measured next to ctx.heap (e.g. CUDA IPC next to NVSHMEM).
  void add_heap(std::unique_ptr<SymmetricHeap> heap) { extra_heap_ = std::move(heap); }
  // Allocates the symmetric buffers once, at the largest size, before any case runs.
  void reserve_heap_buffers(size_t bytes) {
    for (SymmetricHeap* h : heaps()) heap_buffer(*h, bytes);
  }

  std::vector<OpResult> run(const std::vector<std::string>& ops, const std::vector<size_t>& sizes) {
    std::vector<OpResult> results;
    for (const auto& op : ops) {
      for (size_t bytes : sizes) {
        if (op == "all_to_all" || op == "all_gather" || op == "reduce_scatter") {
          results.push_back(collective(op, bytes));
          continue;
        }
        for (bool cross : {false, true}) {
          Ring ring = ring_for(ctx_.topology, ctx_.rank, cross);
          // Every rank must agree to skip: ring existence depends only on the topology shape.
          if (ring.to < 0) continue;
          if (op == "sendrecv") results.push_back(sendrecv(bytes, ring, cross));
          if (op == "put" || op == "get" || op == "peer_copy") {
            for (SymmetricHeap* heap : heaps()) {
              if (op == "peer_copy" && (cross || heap != heaps().front())) continue;
              results.push_back(one_sided(op, *heap, bytes, ring, cross));
            }
          }
        }
      }
    }
    return results;
  }

 private:
  std::vector<SymmetricHeap*> heaps() {
    std::vector<SymmetricHeap*> h;
    if (ctx_.heap) h.push_back(ctx_.heap.get());
    if (extra_heap_) h.push_back(extra_heap_.get());
    return h;
  }

  OpResult time_case(const std::string& op, const std::string& impl, const std::string& pattern,
                     const std::string& link, size_t bytes, double bus_factor, Case& c) {
    const Stream& s = ctx_.stream;
    int warmup = int(opt_.integer("warmup"));
    int iters = int(opt_.integer("iters"));
    for (int i = 0; i < warmup; ++i) c.enqueue();
    ctx_.world->barrier(s);
    ctx_.world->synchronize(s);
    std::vector<Event> starts, ends;
    for (int i = 0; i < iters; ++i) {
      starts.push_back(Event::create(s, true));
      ends.push_back(Event::create(s, true));
    }
    for (int i = 0; i < iters; ++i) {
      starts[size_t(i)].record(s);
      c.enqueue();
      ends[size_t(i)].record(s);
    }
    ctx_.world->synchronize(s);
    if (ctx_.heap) ctx_.heap->check_errors();
    std::vector<double> us;
    for (int i = 0; i < iters; ++i)
      us.push_back(1000.0 * ends[size_t(i)].elapsed_ms_since(starts[size_t(i)]));
    if (c.settle) c.settle();
    int64_t wrong = c.verify();
    OpResult r;
    r.op = op;
    r.impl = impl;
    r.pattern = pattern;
    r.link = link;
    r.bytes = bytes;
    r.median_us = max_across_ranks(ctx_, median(us));
    r.algbw = r.median_us > 0 ? double(bytes) / (r.median_us * 1e3) : 0;
    r.busbw = r.algbw * bus_factor;
    r.wrong = int64_t(sum_across_ranks(ctx_, double(wrong)));
    return r;
  }

  Tensor alloc(size_t elements) { return Tensor::empty({int64_t(elements)}, DType::kI32, ctx_.device); }

  std::string comm_impl() const { return ctx_.backend == Backend::kCuda ? "nccl" : "cpu"; }

  OpResult collective(const std::string& op, size_t bytes) {
    const int n = ctx_.size;
    const size_t elems = bytes / sizeof(int32_t) / size_t(n) * size_t(n);  // divisible by n
    const size_t block = elems / size_t(n);
    const Stream& s = ctx_.stream;
    Tensor big_a = alloc(elems), big_b = alloc(elems), small = alloc(block);
    std::vector<int32_t> host(op == "all_gather" ? block : elems);
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = op == "reduce_scatter" ? encode_summand(ctx_.rank, int64_t(i)) : encode(ctx_.rank, int64_t(i));
    Case c;
    const int me = ctx_.rank;
    if (op == "all_to_all") {
      upload(big_a, host, s);
      c.enqueue = [&] { ctx_.world->all_to_all(big_a, big_b, s); };
      c.verify = [&, block, me] {
        auto out = download(big_b.data(), elems, s);
        int64_t wrong = 0;
        for (size_t i = 0; i < elems; ++i) {
          int src = int(i / block);
          wrong += out[i] != encode(src, int64_t(size_t(me) * block + i % block));
        }
        return wrong;
      };
    } else if (op == "all_gather") {
      upload(small, host, s);
      c.enqueue = [&] { ctx_.world->all_gather(small, big_b, s); };
      c.verify = [&, block] {
        auto out = download(big_b.data(), elems, s);
        int64_t wrong = 0;
        for (size_t i = 0; i < elems; ++i) wrong += out[i] != encode(int(i / block), int64_t(i % block));
        return wrong;
      };
    } else {
      upload(big_a, host, s);
      c.enqueue = [&] { ctx_.world->reduce_scatter(big_a, small, ReduceOp::kSum, s); };
      c.verify = [&, block, me, n] {
        auto out = download(small.data(), block, s);
        int64_t wrong = 0;
        int32_t rank_sum = n * (n + 1) / 2;
        for (size_t i = 0; i < block; ++i)
          wrong += out[i] != rank_sum * int32_t((size_t(me) * block + i) % 1000 + 1);
        return wrong;
      };
    }
    double factor = n > 1 ? double(n - 1) / n : 1.0;
    std::string link = ctx_.topology.num_machines() > 1 ? "mixed" : link_name(ctx_.rank == 0 && n > 1 ? 1 : 0);
    return time_case(op, comm_impl(), "world", link, elems * sizeof(int32_t), factor, c);
  }

  std::string link_name(int peer) const {
    return link_class_name(ctx_.topology.link(ctx_.rank, peer));
  }

  OpResult sendrecv(size_t bytes, Ring ring, bool cross) {
    const size_t elems = bytes / sizeof(int32_t);
    const Stream& s = ctx_.stream;
    Tensor send = alloc(elems), recv = alloc(elems);
    std::vector<int32_t> host(elems);
    for (size_t i = 0; i < elems; ++i) host[i] = encode(ctx_.rank, int64_t(i));
    upload(send, host, s);
    Case c;
    c.enqueue = [&] {
      ctx_.world->group_begin();
      ctx_.world->send(send, ring.to, s);
      ctx_.world->recv(recv, ring.from, s);
      ctx_.world->group_end();
    };
    c.verify = [&] {
      auto out = download(recv.data(), elems, s);
      int64_t wrong = 0;
      for (size_t i = 0; i < elems; ++i) wrong += out[i] != encode(ring.from, int64_t(i));
      return wrong;
    };
    return time_case("sendrecv", comm_impl(), cross ? "cross" : "intra", link_name(ring.to),
                     elems * sizeof(int32_t), 1.0, c);
  }

  OpResult one_sided(const std::string& op, SymmetricHeap& heap, size_t bytes, Ring ring, bool cross) {
    const size_t elems = bytes / sizeof(int32_t);
    const size_t used = elems * sizeof(int32_t);
    const Stream& s = ctx_.stream;
    SymmetricBuffer sym = heap_buffer(heap, used);
    Tensor local = alloc(elems);
    std::vector<int32_t> host(elems);
    for (size_t i = 0; i < elems; ++i) host[i] = encode(ctx_.rank, int64_t(i));
    Case c;
    int expect_from = ring.from;
    if (op == "get") {
      // My symmetric copy holds my pattern; I read the next rank's copy.
      copy_bytes(sym.local, host.data(), used, s);
      s.synchronize();
      heap.barrier(s);
      c.enqueue = [&] { heap.get(local.data(), sym, 0, used, ring.to, s); };
      expect_from = ring.to;
    } else {
      upload(local, host, s);
      fill_bytes(sym.local, 0xff, used, s);
      heap.barrier(s);
      if (op == "put") {
        c.enqueue = [&] { heap.put(sym, 0, local.data(), used, ring.to, s); };
      } else {
        void* peer = heap.peer_ptr(sym, ring.to);
        TESSERA_CHECK(peer != nullptr, ErrorCode::kUnsupported, "peer_copy: rank ", ring.to,
                      " is not load/store reachable from rank ", ctx_.rank);
        c.enqueue = [&, peer] { copy_bytes(peer, local.data(), used, s); };
      }
    }
    c.settle = [&] {
      heap.barrier(s);
      s.synchronize();
      heap.check_errors();
    };
    c.verify = [&, expect_from, op] {
      const void* result = op == "get" ? local.data() : sym.local;
      auto out = download(result, elems, s);
      int64_t wrong = 0;
      for (size_t i = 0; i < elems; ++i) wrong += out[i] != encode(expect_from, int64_t(i));
      return wrong;
    };
    std::string transport = heap.transport(ring.to);
    std::string impl = op != "peer_copy" ? transport
                       : ctx_.backend == Backend::kCuda ? "cudaMemcpyAsync peer" : "memcpy peer";
    return time_case(op, impl, cross ? "cross" : "intra", link_name(ring.to), used, 1.0, c);
  }

  // Symmetric buffers are allocated once per heap at the largest size and reused.
  SymmetricBuffer heap_buffer(SymmetricHeap& heap, size_t bytes) {
    auto& slot = heap_buffers_[&heap];
    if (slot.bytes < bytes) {
      TESSERA_CHECK(slot.bytes == 0, ErrorCode::kInternal, "heap buffer must be sized for the largest case first");
      slot = heap.allocate(bytes);
    }
    return slot;
  }

  RankContext& ctx_;
  const Options& opt_;
  std::unique_ptr<SymmetricHeap> extra_heap_;
  std::map<SymmetricHeap*, SymmetricBuffer> heap_buffers_;
};

const std::vector<std::string> kAllOps = {"all_to_all", "all_gather", "reduce_scatter",
                                          "sendrecv", "put", "get", "peer_copy"};

int run_bench_comm(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt("bench comm",
              {{"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
               {"nranks", "", "ranks (default: every visible GPU on cuda, 4 on cpu)"},
               {"ops", "all",
                "comma list of " +
                    std::string("all_to_all,all_gather,reduce_scatter,sendrecv,put,get,peer_copy")},
               {"min-bytes", "1M", "smallest size"},
               {"max-bytes", "", "largest size (default 256M on cuda, 4M on cpu)"},
               {"step-factor", "4", "multiply the size by this between cases"},
               {"warmup", "5", "untimed iterations per case"},
               {"iters", "20", "timed iterations per case (median reported)"},
               {"emulate-nodes", "1", "group the ranks into N emulated machines"},
               {"link", "nic400", "emulated link preset: nic400 (50 GB/s, 5 us) or paper"},
               {"link-gbps", "0", "emulated link bandwidth per GPU in GB/s (overrides --link)"},
               {"link-latency-us", "-1", "emulated link latency in us (overrides --link)"},
               {"heap", "auto", "symmetric heap: nvshmem, ipc or auto"},
               {"compare-heaps", "", "also measure the CUDA IPC heap next to NVSHMEM", true},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  RankLaunch launch;
  launch.backend = opt.text("backend");
  launch.nranks = nranks_option(opt.text("nranks"));
  apply_emulation_options(int(opt.integer("emulate-nodes", 1, 4096)), opt.text("link"),
                          opt.number("link-gbps"), opt.number("link-latency-us"), launch.context);
  launch.context.heap_transport = opt.text("heap");
  std::vector<std::string> ops = opt.text("ops") == "all" ? kAllOps : opt.list("ops");
  for (const auto& op : ops) {
    TESSERA_CHECK_ARG(std::find(kAllOps.begin(), kAllOps.end(), op) != kAllOps.end(), "--ops: unknown operation '",
                      op, "'; expected some of all_to_all, all_gather, reduce_scatter, sendrecv, put, get, peer_copy");
  }
  const bool on_gpu = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  size_t max_bytes = opt.given("max-bytes") && !opt.text("max-bytes").empty()
                         ? opt.bytes("max-bytes") : (on_gpu ? size_t(256) << 20 : size_t(4) << 20);
  std::vector<size_t> sizes;
  const size_t factor = size_t(opt.integer("step-factor", 2, 1024));
  const size_t min_bytes = opt.bytes("min-bytes");
  TESSERA_CHECK_ARG(min_bytes >= 1, "--min-bytes = '", opt.text("min-bytes"), "': expected >= 1");
  // max_bytes <= 2^62 and factor <= 2^10: the last product cannot wrap.
  for (size_t b = min_bytes; b <= max_bytes; b *= factor) sizes.push_back(b);
  TESSERA_CHECK_ARG(!sizes.empty(), "--min-bytes ", opt.text("min-bytes"), " exceeds --max-bytes");
  // Checked here, read again where the timing loops run.
  (void)opt.integer("iters", 1, 1000000);
  (void)opt.integer("warmup", 0, 1000000);
  // Send and receive buffers of the largest size on every rank, in the symmetric heap.
  const size_t heap = saturating_product({max_bytes, 2});
  check_memory_fits(launch, heap, "--max-bytes", format_bytes(max_bytes),
                    "a send and a receive buffer of --max-bytes per rank");
  launch.context.heap_bytes = heap + (size_t(64) << 20);
  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    CommBench bench(ctx, opt);
    bool wants_one_sided = std::any_of(ops.begin(), ops.end(), [](const std::string& o) {
      return o == "put" || o == "get" || o == "peer_copy";
    });
    if (opt.flag("compare-heaps") && ctx.backend == Backend::kCuda && ctx.heap &&
        ctx.heap->transport(ctx.rank).rfind("nvshmem", 0) == 0) {
      bench.add_heap(create_symmetric_heap(ctx, "ipc", max_bytes + (size_t(16) << 20)));
    }
    if (wants_one_sided) bench.reserve_heap_buffers(max_bytes);
    auto results = bench.run(ops, sizes);
    if (ctx.rank != 0) return;
    std::string topo = topology_label(ctx.topology);
    std::printf("# tessera bench comm: %d ranks, %s, backend %s", ctx.size, topo.c_str(), backend_name(ctx.backend));
    if (ctx.topology.emulated)
      std::printf(", emulated link %.1f GB/s %.1f us (%s)", ctx.options.emulated_link.bandwidth_gbps,
                  ctx.options.emulated_link.latency_us, ctx.options.emulated_link.preset.c_str());
    std::printf("\n# %-15s %-22s %-6s %-16s %8s %12s %11s %11s %7s\n", "op", "impl", "ring", "link", "size",
                "median_us", "algbw_GB/s", "busbw_GB/s", "#wrong");
    std::vector<BenchRecord> records;
    for (const auto& r : results) {
      std::printf("  %-15s %-22s %-6s %-16s %8s %12.1f %11.2f %11.2f %7lld\n", r.op.c_str(), r.impl.c_str(),
                  r.pattern.c_str(), r.link.c_str(), format_bytes(r.bytes).c_str(), r.median_us, r.algbw,
                  r.busbw, static_cast<long long>(r.wrong));
      BenchRecord rec;
      rec.bench = "comm";
      rec.case_name = str(r.op, " ", r.pattern, " ", format_bytes(r.bytes));
      rec.impl = "tessera " + r.impl;
      rec.gpu = gpu_name(ctx);
      rec.num_gpus = ctx.backend == Backend::kCuda ? ctx.size : 0;
      rec.topology = topo;
      rec.median_us = r.median_us;
      rec.gbps = r.algbw;
      rec.ok = r.wrong == 0;
      rec.extra["busbw_gbps"] = r.busbw;
      rec.extra["bytes"] = double(r.bytes);
      rec.extra["wrong"] = double(r.wrong);
      rec.extra_text["op"] = r.op;
      rec.extra_text["ring"] = r.pattern;
      rec.extra_text["link"] = r.link;
      records.push_back(rec);
    }
    int64_t total_wrong = 0;
    for (const auto& r : results) total_wrong += r.wrong;
    std::printf("# %zu cases, #wrong total %lld\n", results.size(), static_cast<long long>(total_wrong));
    if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
    if (total_wrong != 0) throw_error(ErrorCode::kInternal, str("bench comm: ", total_wrong, " wrong elements"));
  });
}

const CommandRegistration kBenchComm("bench comm",
                                     "communication sweep (collectives, send/recv, one-sided put/get)",
                                     run_bench_comm);

}  // namespace
}  // namespace tessera::cli
