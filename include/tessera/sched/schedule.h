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
// on GPUs each operation runs on the stream of its kind (compute, memory, network) or the one
// its strategy places it on, and the order and the placement decide what overlaps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model/llama_layer.h"
#include "tessera/model/packed_batch.h"

namespace tessera::sched {

// Sequences [first_seq, first_seq + num_seqs) of a packed batch: rows [first_row, + rows).
// cached_positions: the positions its sequences had in the KV cache before this step (the sum
// of their starts), which its attention reads besides its own rows: what makes a decode's
// attention memory-bound; none for a nano-batch of new prompts.
struct NanoBatch {
  size_t first_seq = 0, num_seqs = 0;
  int64_t first_row = 0, rows = 0;
  int64_t cached_positions = 0;
};

struct Step {
  int64_t layer = 0;
  model::LlamaOp op = model::LlamaOp::kAttnNorm;
};

// Where a strategy runs one operation. stream: the stream of that kind (none: the operation's
// own kind's). gemm_sm_percent: its GEMMs take at most that share of the multiprocessors, the
// rest staying free for what another stream runs beside it (NanoFlow's partition of the GPU);
// attention_sm_percent, the same for its decode attention (the split-KV kernel's persistent
// grid, where it takes the shapes: kernels/decode/split_kv_tma_launch.h). The cpu backend runs
// every operation inline and ignores the three.
struct Placement {
  std::optional<model::OpKind> stream;
  int gemm_sm_percent = 100;       // 1 to 100
  int attention_sm_percent = 100;  // 1 to 100
};

// The steps a strategy schedules (DynaFlow's partition of a model into schedulable
// subgraphs): layers [first_layer, end_layer) and, when `ops` is not empty, only those
// operations. The context runs every other step itself, in chain order on the compute stream,
// as soon as its nano-batch reaches it: the strategy sees only its partition's steps.
struct Partition {
  int64_t first_layer = 0, end_layer = INT64_MAX;
  std::vector<model::LlamaOp> ops;  // empty: all nine
  bool contains(Step step) const;
};
// "layers=A-B" (A to B inclusive) or "layers=A", "ops=OP+OP+..." (llama_op_name's names), or
// both joined by '/'. Throws kInvalidArgument naming `text` and the expected form otherwise.
Partition parse_partition(std::string_view text);

// How a fused group runs: chunks, the row chunks of a kRowParallelPipelined group (1 to 64; 1
// for the other kinds); gemm_sm_percent, the share of the multiprocessors its GEMMs take (1 to
// 100), the rest left to the collectives that run beside them. The cpu backend runs the
// chunks inline and ignores the share.
struct FusedOptions {
  int chunks = 1;
  int gemm_sm_percent = 100;
};

// Sequences [first_seq, first_seq + num_seqs) of `batch` as one nano-batch, its rows and cached
// positions summed. Throws kInvalidArgument when they are not in the batch.
NanoBatch nano_batch_of(const model::PackedBatch& batch, size_t first_seq, size_t num_seqs);
// Splits `batch` at sequence boundaries into at most `parts` nano-batches of about equal
// tokens (greedy: a nano-batch closes once it reaches its share); every sequence in exactly one.
std::vector<NanoBatch> token_balanced_split(const model::PackedBatch& batch, int parts);
// Splits `batch` at the sequence boundary that NanoFlow's two overlapped phases (each nano-batch's
// attention beside the other's GEMMs) finish soonest by a cost model in GEMM-row units: a
// nano-batch's GEMMs on gemm_sm_percent of the multiprocessors cost its rows; its attention
// costs its cached positions over positions_per_row (how many cached positions the attention
// reads, on the rest of the multiprocessors, in the time the GEMMs take for one row: a
// property of the model and the GPU, measured by bench sched's variants); beside an attention
// that reads no cache the GEMMs take the whole GPU. A phase costs the larger of its two sides.
// Among equal costs the split with the most even rows wins, so a batch of prompts alone splits
// as token_balanced_split does. One nano-batch for a batch of one sequence. Throws
// kInvalidArgument naming positions_per_row (1 to kMostPositionsPerRow) or gemm_sm_percent (1
// to 100).
inline constexpr int64_t kMostPositionsPerRow = int64_t(1) << 24;
std::vector<NanoBatch> overlap_balanced_split(const model::PackedBatch& batch,
                                              int64_t positions_per_row, int gemm_sm_percent);

// The index of `nano` among `nanos` (matched by its first sequence). Throws kInvalidArgument
// when it is not one of them.
int nano_batch_index(std::span<const NanoBatch> nanos, const NanoBatch& nano);

class ScheduleContext {
 public:
  using Executor = std::function<void(const NanoBatch& nano, Step step, const Placement& where)>;
  // Runs the model::kFusedGroupSteps steps of a chain from `first` as one fused operation of
  // kind `group` (the model's implementation of it; it refuses kinds it has none for), as `how`
  // says.
  using FusedExecutor = std::function<void(const NanoBatch& nano, Step first,
                                           model::FusedGroup group, const FusedOptions& how)>;
  // group_size: the ranks the model's collectives span (1: they have nothing to wait for).
  // declared: the fused groups the strategy declared (Strategy::fused_groups), the only kinds
  // run_fused accepts, so a model's check of the declaration before it runs holds; none: not
  // checked (a context driven by hand). partition: the steps the strategy schedules
  // (Strategy::partition); the context runs the others itself, from the constructor on (none:
  // every step is the strategy's).
  ScheduleContext(int64_t layers, std::vector<NanoBatch> nanos, Executor execute,
                  FusedExecutor execute_fused = {}, int group_size = 1,
                  std::optional<std::vector<model::FusedGroup>> declared = std::nullopt,
                  std::optional<Partition> partition = std::nullopt);

  int num_nano_batches() const { return int(nanos_.size()); }
  int group_size() const { return group_size_; }
  const NanoBatch& nano_batch(int n) const { return nanos_.at(size_t(n)); }
  // Nano-batch n's next operation in the partition; none once its chain is done.
  std::optional<Step> ready(int n) const;
  // Runs `step` on nano-batch n, placed at `where`. Throws kInvalidArgument naming the step and
  // the one whose output it needs when `step` is not ready(n), when n is out of range, or when
  // where.gemm_sm_percent is not 1 to 100.
  void run(int n, Step step, const Placement& where = {});
  // Runs ready(n).
  void run_next(int n, const Placement& where = {});
  // Runs the steps of nano-batch n's chain from `first` (which must be ready(n)) as one fused
  // operation of kind `group`, as `how` says; each step is traced. Throws kInvalidArgument like
  // run(), or when the chain has fewer steps left, `group` does not start at `first` or is not
  // one the strategy declared, `how` is out of its ranges, or there is no fused executor.
  void run_fused(int n, Step first, model::FusedGroup group, const FusedOptions& how = {});
  // The step after `step` in a chain (the next layer's first after a layer's last); none after
  // the last layer.
  std::optional<Step> after(Step step) const;
  bool finished() const;
  // (nano-batch, step) in the order they ran.
  const std::vector<std::pair<int, Step>>& trace() const { return trace_; }

 private:
  // Checks that `step` is ready(n), naming what it waits for otherwise.
  void check_ready(int n, Step step) const;
  // Runs nano-batch n's next steps outside the partition, in order, on the compute stream.
  void run_outside_partition(int n);

  int64_t layers_ = 0;
  int group_size_ = 1;
  std::vector<NanoBatch> nanos_;
  Executor execute_;
  FusedExecutor execute_fused_;
  std::optional<std::vector<model::FusedGroup>> declared_;
  std::optional<Partition> partition_;
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
  // The kinds of fused group schedule() may run through ctx.run_fused (none by default): a
  // model checks them before it runs anything.
  virtual std::vector<model::FusedGroup> fused_groups() const { return {}; }
  // The steps schedule() orders (none: all of them); the context runs the others.
  virtual std::optional<Partition> partition() const { return std::nullopt; }
};

// "sequential" (one nano-batch, in order, every operation on the compute stream: the
// unscheduled step's launches), "nanoflow" (two token-balanced nano-batches from
// kNanoFlowMinTokens rows; each runs up to and including its next attention, and with more than
// one rank its next collective, then the other takes over, so one's decode attention and
// collectives run beside the other's GEMMs; those GEMMs take kNanoFlowGemmSmPercent of the
// multiprocessors, or P% with the name "nanoflow:P", or only the first W of them
// "nanoflow:P:W", beside an attention that reads cached positions; beside one of new prompts
// only, all), "dual_batch"
// (two nano-batches, each run up to and including its next collective, then the other: one's
// communication beside the other's compute, as vLLM's and SGLang's dual-batch overlap),
// "single_batch" (sequential's one nano-batch, each row-parallel GEMM and its all-reduce run in
// row chunks of kSingleBatchChunkRows, or R with "single_batch:R", each chunk's all-reduce
// beside the next chunk's GEMM, as SGLang's single-batch overlap; those GEMMs take
// kSingleBatchGemmSmPercent of the multiprocessors, or P% with "single_batch:R:P"), "tokenweave"
// (dual-batch's order, and each all-reduce fused with the RMSNorm after it: reduce-scatter, the
// norm on this rank's rows, all-gather, as TokenWeave does), "flux" (sequential's order, each
// row-parallel GEMM and its all-reduce run as a fused GEMM+ReduceScatter and an all-gather: the cpu
// model made with a RankContext that has a symmetric heap; not yet on cuda, and not in
// strategy_names(), which the GPU benches run). Any of them followed by "@PARTITION"
// (parse_partition) schedules only that partition's steps, e.g. "nanoflow@layers=4-7" or
// "dual_batch@ops=o_proj+o_all_reduce". Throws kInvalidArgument naming the known ones otherwise.
std::unique_ptr<Strategy> make_strategy(const std::string& name);
// True where make_strategy(name) makes one.
bool known_strategy(const std::string& name);
std::vector<std::string> strategy_names();

}  // namespace tessera::sched
