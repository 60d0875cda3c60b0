// `tessera run llm`: a Llama-family decoder end to end: B sequences of random prompt tokens
// prefilled together (whole, or --prefill-chunk tokens of each prompt a forward: chunked
// prefill), then G greedy decode steps for all of them; prints the prefill latency, the time
// per output token and tokens/s, and writes --json (bench "llm").
//   cuda: LlamaGpuModel in bf16, one process per tensor-parallel rank (NCCL all-reduces);
//         decode steps replay CUDA graphs; a warm-up prefill first (plans, module loading), and
//         the decode record carries the fraction of the HBM roofline (weights and KV bytes read
//         per step over the bandwidth measured in the same run).
//   cpu:  LlamaModel, float32 reference layers on --tp rank threads.
// Weights: a --weights safetensors file or directory (Hugging Face names, each rank loading its
// shard), else random from --seed. --config: a config.json (file or directory), or a preset:
// tiny (2 layers, hidden 64), llama3-8b or llama3-70b (Llama-3-8B's or -70B's dimensions;
// --layers cuts the stack).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "hbm_bandwidth.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/error.h"
#include "tessera/model/decoder_presets.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/safetensors.h"
#include "tessera/model/weight_store.h"
#include "tessera/runtime/memory.h"
#include "tessera/sched/rule.h"

namespace tessera::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What one rank's run measured, for the printout and the records.
struct LlmRun {
  double prefill_s = 0, tpot_s = 0;  // tpot: the median decode step
  std::vector<std::vector<int32_t>> generated;
  std::vector<float> prefill_logits;  // sequence 0's, [prompt, vocab] (with --logits-out)
  double roofline_fraction = 0, hbm_gbps = 0, bytes_per_step = 0;  // cuda only
  std::string gpu = "cpu";
};

struct LlmArgs {
  model::DecoderConfig config;
  std::vector<std::vector<int32_t>> prompts;
  int64_t gen = 0, page = 16;
  int64_t prefill_chunk = 0;  // prompt tokens a prefill forward takes per sequence (0: all)
  uint64_t seed = 1;
  std::string weights_path;
  bool logits = false, graphs = true, fused_decode = false;
  std::string strategy;  // a scheduler strategy's name (sched/rule.h), or empty: none

  int64_t batch() const { return int64_t(prompts.size()); }
  int64_t prompt_len() const { return int64_t(prompts[0].size()); }
  // KV cache pages one sequence needs for its prompt and generated tokens.
  int64_t pages_per_seq() const { return (prompt_len() + gen + page - 1) / page; }
};

model::LlamaTensorSource weight_source(const LlmArgs& a,
                                       std::unique_ptr<model::WeightStore>& store) {
  if (a.weights_path.empty()) return model::random_llama_source(a.seed);
  store = std::make_unique<model::WeightStore>(model::WeightStore::open(a.weights_path));
  return model::store_llama_source(*store);
}

// Prefill, then greedy decoding of every sequence for `a.gen` tokens; `prefill` and `step` each
// run one forward and return every input's next token. Times the prefill and each step.
template <typename Prefill, typename DecodeStep>
void generate(const LlmArgs& a, RankContext& ctx, LlmRun& run,
              std::vector<model::SequenceTokens>& inputs, Prefill&& prefill, DecodeStep&& step) {
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> next = prefill();
  run.prefill_s = max_across_ranks(ctx, seconds_since(start));
  run.generated.assign(inputs.size(), {});
  std::vector<double> steps;
  for (int64_t i = 0; i < a.gen; ++i) {
    for (size_t s = 0; s < inputs.size(); ++s) {
      run.generated[s].push_back(next[s]);
      inputs[s].tokens = {next[s]};
    }
    if (i + 1 == a.gen) break;
    start = std::chrono::steady_clock::now();
    next = step();
    steps.push_back(max_across_ranks(ctx, seconds_since(start)));
    if (ctx.rank == 0 && (i + 1) % 64 == 0)
      std::printf("# decode step %lld of %lld\n", static_cast<long long>(i + 1),
                  static_cast<long long>(a.gen - 1));
  }
  // The first steps of a batch size plan and capture its graph: the median is the steady state.
  run.tpot_s = steps.empty() ? 0 : median(steps);
}

// The prefill: every prompt whole in one forward, or --prefill-chunk tokens of each per forward
// (chunked prefill: each chunk after the tokens cached before it). `forward` runs one forward of
// `inputs` and returns every input's next token; the last chunk's are returned.
template <typename Forward>
std::vector<int32_t> prefill_prompts(const LlmArgs& a, std::vector<model::SequenceTokens>& inputs,
                                     Forward&& forward) {
  const int64_t prompt = a.prompt_len();
  const int64_t chunk = a.prefill_chunk > 0 ? std::min(a.prefill_chunk, prompt) : prompt;
  std::vector<int32_t> next;
  for (int64_t first = 0; first < prompt; first += chunk) {
    const int64_t end = std::min(prompt, first + chunk);
    for (size_t s = 0; s < inputs.size(); ++s)
      inputs[s].tokens.assign(a.prompts[s].begin() + first, a.prompts[s].begin() + end);
    next = forward();
  }
  return next;
}

// The scheduler strategy of --strategy for this rank's model, or null.
std::unique_ptr<sched::Strategy> scheduled(const LlmArgs& a, const RankContext& ctx) {
  if (a.strategy.empty()) return nullptr;
  return sched::make_named_strategy(a.strategy, {gpu_name(ctx), ctx.size, a.config.hidden_size});
}

int32_t argmax_row(const float* row, int64_t n) {
  return int32_t(std::max_element(row, row + n) - row);
}

LlmRun run_cpu_rank(const LlmArgs& a, RankContext& ctx) {
  LlmRun run;
  std::unique_ptr<model::WeightStore> store;
  const model::LlamaTensorSource source = weight_source(a, store);
  const int64_t prompt = a.prompt_len();
  model::LlamaModel m(a.config, model::load_llama_weights(a.config, source, ctx.rank, ctx.size),
                      {a.page, a.batch() * a.pages_per_seq()}, ctx);
  const auto strategy = scheduled(a, ctx);
  std::vector<model::SequenceTokens> inputs;
  for (const auto& p : a.prompts) inputs.push_back({m.add_sequence(), p});
  const int64_t vocab = a.config.vocab_size;
  // Each input's last row of the logits forward() returned.
  auto last_tokens = [&](const std::vector<float>& logits) {
    std::vector<int32_t> next;
    int64_t row = 0;
    for (const auto& in : inputs) {
      row += int64_t(in.tokens.size());
      next.push_back(argmax_row(logits.data() + (row - 1) * vocab, vocab));
    }
    return next;
  };
  generate(
      a, ctx, run, inputs,
      [&] {
        return prefill_prompts(a, inputs, [&] {
          std::vector<float> logits = strategy ? m.forward(inputs, *strategy) : m.forward(inputs);
          if (a.logits) run.prefill_logits.assign(logits.begin(), logits.begin() + prompt * vocab);
          return last_tokens(logits);
        });
      },
      [&] { return last_tokens(strategy ? m.forward(inputs, *strategy) : m.forward(inputs)); });
  return run;
}

LlmRun run_cuda_rank(const LlmArgs& a, RankContext& ctx) {
  LlmRun run;
  std::unique_ptr<model::WeightStore> store;
  const model::LlamaTensorSource source = weight_source(a, store);
  const int64_t batch = a.batch(), prompt = a.prompt_len();
  model::LlamaGpuOptions o;
  o.device = ctx.device.index;
  o.cache = {a.page, batch * a.pages_per_seq()};  // the warm-up's sequences are released first
  o.max_tokens = batch * prompt;
  o.max_batch = batch;
  o.max_context = prompt + a.gen;
  o.max_logit_rows = a.logits ? batch * prompt : batch;
  o.cuda_graphs = a.graphs;
  o.fused_decode = a.fused_decode;
  model::LlamaGpuModel m(a.config, source, o, ctx.size > 1 ? ctx.world.get() : nullptr);
  run.gpu = gpu_name(ctx);
  const auto strategy = scheduled(a, ctx);
  const int64_t vocab = a.config.vocab_size;
  // Warm-up prefill (plans, kernel modules), on sequences released again.
  std::vector<model::SequenceTokens> inputs;
  for (const auto& p : a.prompts) inputs.push_back({m.add_sequence(), p});
  prefill_prompts(a, inputs, [&] { return m.forward_greedy(inputs, strategy.get()); });
  for (const auto& in : inputs) m.release_sequence(in.seq_id);
  for (auto& in : inputs) in.seq_id = m.add_sequence();
  generate(
      a, ctx, run, inputs,
      [&] {
        if (!a.logits)
          return prefill_prompts(a, inputs,
                                 [&] { return m.forward_greedy(inputs, strategy.get()); });
        std::vector<float> logits = m.forward(inputs, model::LogitRows::kAll, strategy.get());
        run.prefill_logits.assign(logits.begin(), logits.begin() + prompt * vocab);
        std::vector<int32_t> next;
        for (int64_t s = 0; s < batch; ++s)
          next.push_back(argmax_row(logits.data() + ((s + 1) * prompt - 1) * vocab, vocab));
        return next;
      },
      [&] { return m.forward_greedy(inputs, strategy.get()); });
  // A decode step reads every weight once and each sequence's cached keys and values (at the
  // middle of the generation: the median step's context).
  const int64_t context = prompt + a.gen / 2;
  const model::LlamaShapes& s = m.shapes();
  run.bytes_per_step =
      double(m.weight_bytes()) + double(batch * context * s.num_layers * 2 * s.kv_width() * 2);
  run.hbm_gbps = measure_hbm_read_gbps(m.stream());
  run.roofline_fraction =
      run.tpot_s > 0 ? run.bytes_per_step / (run.hbm_gbps * 1e9) / run.tpot_s : 0;
  return run;
}

int run_llm(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt("run llm",
              {{"config", "tiny",
                "config.json (file or directory), or a preset: tiny, llama3-8b, llama3-70b"},
               {"weights", "", "safetensors file or directory (default: random from --seed)"},
               {"layers", "0", "decoder layers to run (0: the configuration's)"},
               {"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
               {"tp", "1", "tensor-parallel ranks (GPUs on cuda, rank threads on cpu)"},
               {"batch", "1", "sequences"},
               {"prompt-len", "16", "prompt tokens per sequence"},
               {"gen", "8", "greedy tokens generated per sequence"},
               {"page-size", "16", "KV cache page size (tokens)"},
               {"prefill-chunk", "0",
                "prefill each prompt in forwards of this many tokens (chunked prefill; 0: whole)"},
               {"seed", "1", "seed of the random weights and prompt tokens"},
               {"prompt-tokens", "", "comma list of prompt token ids (batch 1; default: random)"},
               {"graphs", "1", "cuda: replay decode steps from CUDA graphs (0: eager)"},
               {"fused-decode", "0", "cuda: decode steps through the fused attention-block kernel"},
               {"strategy", "",
                "order the layers' operations by a scheduler strategy: sequential, nanoflow, "
                "dual_batch, single_batch, tokenweave or auto (the rule, "
                "TESSERA_SCHED_TUNE_TABLE); default none"},
               {"logits-out", "",
                "write sequence 0's prefill logits [prompt, vocab] and its "
                "generated tokens to this safetensors file"},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  LlmArgs a;
  a.config = model::load_decoder_config(opt.text("config"), "--config");
  const int64_t layers = opt.integer("layers", 0, 1 << 16);
  if (layers > 0) a.config.num_hidden_layers = layers;
  const int tp = int(opt.integer("tp", 1, 64));
  std::vector<int32_t> given;
  for (const std::string& t :
       opt.text("prompt-tokens").empty() ? std::vector<std::string>{} : opt.list("prompt-tokens"))
    given.push_back(int32_t(parse_integer(t, "--prompt-tokens", 0, a.config.vocab_size - 1)));
  const int64_t batch = given.empty() ? opt.integer("batch", 1, 4096) : 1,
                prompt =
                    given.empty() ? opt.integer("prompt-len", 1, 1 << 20) : int64_t(given.size());
  a.gen = opt.integer("gen", 0, 1 << 20);
  a.page = opt.integer("page-size", 1, 1 << 16);
  a.prefill_chunk = opt.integer("prefill-chunk", 0, 1 << 20);
  a.seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  a.weights_path = opt.text("weights");
  a.graphs = opt.integer("graphs", 0, 1) == 1;
  a.fused_decode = opt.integer("fused-decode", 0, 1) == 1;
  a.strategy = opt.text("strategy");
  if (!a.strategy.empty()) (void)sched::make_named_strategy(a.strategy, {});  // the name checked
  a.logits = !opt.text("logits-out").empty();
  TESSERA_CHECK_ARG(!a.logits || a.prefill_chunk == 0 || a.prefill_chunk >= prompt,
                    "--prefill-chunk = ", a.prefill_chunk, ": --logits-out writes the logits of "
                    "one whole-prompt prefill; expected 0 (or the prompt length) with it");
  a.prompts.assign(size_t(batch), {});
  std::mt19937_64 rng(a.seed);
  for (auto& p : a.prompts) {
    for (int64_t t = 0; t < prompt; ++t)
      p.push_back(int32_t(rng() % uint64_t(a.config.vocab_size)));
  }
  if (!given.empty()) a.prompts[0] = given;

  RankLaunch launch;
  launch.backend = opt.text("backend");
  launch.nranks = tp;
  const bool on_cuda = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  // The cpu model's flux strategy runs its fused operations on the symmetric heap.
  launch.context.create_heap = !on_cuda && a.strategy == "flux";
  const std::string model_name = opt.text("config") + (layers > 0 ? str("-", layers, "l") : "");
  const int code = run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    const LlmRun run = on_cuda ? run_cuda_rank(a, ctx) : run_cpu_rank(a, ctx);
    if (ctx.rank != 0) return;
    std::vector<BenchRecord> records;
    const int64_t steps = a.gen > 1 ? a.gen - 1 : 0;
    const double tokens_per_s = run.tpot_s > 0 ? double(batch) / run.tpot_s : 0;
    std::printf(
        "# tessera run llm: %s, %lld layers, tp %d (%s), batch %lld, prompt %lld%s, gen %lld\n",
        model_name.c_str(), static_cast<long long>(a.config.num_hidden_layers), tp,
        on_cuda ? "cuda bf16" : "cpu f32", static_cast<long long>(batch),
        static_cast<long long>(prompt),
        a.prefill_chunk > 0 ? str(" in chunks of ", a.prefill_chunk).c_str() : "",
        static_cast<long long>(a.gen));
    std::printf(
        "  prefill          %10.2f ms\n  per output token %10.3f ms (median of %lld steps)\n"
        "  decode tokens/s  %10.1f\n",
        1000.0 * run.prefill_s, 1000.0 * run.tpot_s, static_cast<long long>(steps), tokens_per_s);
    if (on_cuda && run.tpot_s > 0)
      std::printf("  decode roofline  %10.1f%% (%.2f GB per step at %.0f GB/s measured)\n",
                  100.0 * run.roofline_fraction, run.bytes_per_step * 1e-9, run.hbm_gbps);
    std::printf("  sequence 0 generated:");
    for (int32_t t : run.generated[0]) std::printf(" %d", t);
    std::printf("\n");
    if (a.logits) {
      const std::vector<int64_t> logits_dims = {prompt, int64_t(a.config.vocab_size)};
      const std::vector<int64_t> token_dims = {int64_t(run.generated[0].size())};
      const std::vector<model::NamedTensor> out = {
          {"prefill_logits",
           TensorView::contiguous(const_cast<float*>(run.prefill_logits.data()), DType::kF32,
                                  Device::cpu(), logits_dims.data(), 2)},
          {"generated", TensorView::contiguous(const_cast<int32_t*>(run.generated[0].data()),
                                               DType::kI32, Device::cpu(), token_dims.data(), 1)}};
      model::write_safetensors(opt.text("logits-out"), out);
    }
    for (const bool prefill : {true, false}) {
      BenchRecord rec;
      rec.bench = "llm";
      rec.case_name =
          str(model_name, " b", batch, " ctx", prompt, prefill ? " prefill" : " decode");
      rec.impl = !prefill && a.fused_decode ? "tessera fused decode" : "tessera";
      if (!a.strategy.empty()) rec.impl += " " + a.strategy;
      rec.gpu = run.gpu;
      rec.num_gpus = on_cuda ? tp : 0;
      rec.topology = str("tp", tp, on_cuda ? "" : " cpu");
      rec.median_us = 1e6 * (prefill ? run.prefill_s : run.tpot_s);
      rec.ok = true;
      if (!prefill) rec.extra["tokens_per_s"] = tokens_per_s;
      if (prefill && a.prefill_chunk > 0) rec.extra["prefill_chunk"] = double(a.prefill_chunk);
      if (!prefill && on_cuda) rec.extra["roofline_fraction"] = run.roofline_fraction;
      records.push_back(rec);
    }
    // Here, on rank 0: cuda ranks are worker processes, the launcher's parent has no records.
    if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  });
  return code;
}

const CommandRegistration kRunLlm(
    "run llm", "a Llama-family decoder end to end: prefill, greedy decode, latency", run_llm);

}  // namespace
}  // namespace tessera::cli
