// The operator scheduler (DynaFlow): a model's forward as logical operations per nano-batch,
// and strategies that split a batch into nano-batches and decide which ready operation runs
// next. The model's definition (model/llama_layer.h: nine operations a layer) stays apart from
// its execution order.
//
// A forward of `layers` layers over nano-batches n = 0..N-1 is, for each n, the chain
// (layer 0, op 0), (layer 0, op 1), ..., (layers-1, op 8): each operation reads what the one
// before it in the chain wrote for the same rows. Nano-batches are whole sequences, their rows
// contiguous, so each is a row range (a view) of the batch's buffers: splitting and merging copy
// nothing. Strategies order the chains' operations; every order gives the same result bitwise
// (rows are independent, the all-reduces sum per element in rank order), and every rank must
// follow the same order (the all-reduces are collectives): strategies are deterministic.
// Running an operation before its input is ready is an error naming both, not a race.
//
// On the cpu backend every operation runs inline, so strategies change the order, not the time;
// on GPUs each operation kind gets its stream (compute, memory, network) and the order decides
// what overlaps (not built yet).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/model/llama_layer.h"
#include "tessera/model/packed_batch.h"

namespace tessera::sched {

// Sequences [first_seq, first_seq + num_seqs) of a packed batch: rows [first_row, + rows).
struct NanoBatch {
  size_t first_seq = 0, num_seqs = 0;
  int64_t first_row = 0, rows = 0;
};

struct Step {
  int64_t layer = 0;
  model::LlamaOp op = model::LlamaOp::kAttnNorm;
};

// Splits `batch` at sequence boundaries into at most `parts` nano-batches of about equal
// tokens (greedy: a nano-batch closes once it reaches its share); every sequence in exactly one.
std::vector<NanoBatch> token_balanced_split(const model::PackedBatch& batch, int parts);

class ScheduleContext {
 public:
  using Executor = std::function<void(const NanoBatch& nano, Step step)>;
  // Runs `count` consecutive steps of a chain from `first` as one fused operation (the model's
  // implementation of that group; it refuses groups it has none for).
  using FusedExecutor = std::function<void(const NanoBatch& nano, Step first, int count)>;
  ScheduleContext(int64_t layers, std::vector<NanoBatch> nanos, Executor execute,
                  FusedExecutor execute_fused = {});

  int num_nano_batches() const { return int(nanos_.size()); }
  const NanoBatch& nano_batch(int n) const { return nanos_.at(size_t(n)); }
  // Nano-batch n's next operation; none once its chain is done.
  std::optional<Step> ready(int n) const;
  // Runs `step` on nano-batch n. Throws kInvalidArgument naming the step and the one whose
  // output it needs when `step` is not ready(n), or when n is out of range.
  void run(int n, Step step);
  // Runs ready(n).
  void run_next(int n);
  // Runs the `count` steps of nano-batch n's chain from `first` (which must be ready(n)) as one
  // fused operation; each is traced. Throws kInvalidArgument like run(), or when the chain has
  // fewer steps left or there is no fused executor.
  void run_fused(int n, Step first, int count);
  // The step after `step` in a chain (the next layer's first after a layer's last); none after
  // the last layer.
  std::optional<Step> after(Step step) const;
  bool finished() const;
  // (nano-batch, step) in the order they ran.
  const std::vector<std::pair<int, Step>>& trace() const { return trace_; }

 private:
  // Checks that `step` is ready(n), naming what it waits for otherwise.
  void check_ready(int n, Step step) const;

  int64_t layers_ = 0;
  std::vector<NanoBatch> nanos_;
  Executor execute_;
  FusedExecutor execute_fused_;
  std::vector<int64_t> next_;  // per nano-batch: index of its next step in the chain
  std::vector<std::pair<int, Step>> trace_;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  virtual std::vector<NanoBatch> split(const model::PackedBatch& batch) const = 0;
  // Runs every step of `ctx` (until ctx.finished()).
  virtual void schedule(ScheduleContext& ctx) const = 0;
};

// "sequential" (one nano-batch, in order), "nanoflow" (two token-balanced nano-batches from 64
// tokens, the next operation taken from the other nano-batch when its ready operation is of
// another kind than the last one run: compute beside memory or network), "dual_batch"
// (two nano-batches, each run up to and including its next collective, then the other: one's
// communication beside the other's compute, as vLLM's and SGLang's dual-batch overlap),
// "tokenweave" (dual-batch's order, and each all-reduce fused with the RMSNorm after it:
// reduce-scatter, the norm on this rank's rows, all-gather, as TokenWeave does).
// Throws kInvalidArgument naming the known ones otherwise.
std::unique_ptr<Strategy> make_strategy(const std::string& name);
std::vector<std::string> strategy_names();

}  // namespace tessera::sched
