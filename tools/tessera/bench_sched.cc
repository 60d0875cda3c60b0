// `tessera bench sched`: one Llama-family stack under each scheduler strategy (sched/schedule.h)
// side by side, on steps that mix decodes and prefills as a serving engine's do (NanoFlow's and
// DynaFlow's setting): per step, --decode sequences (one count for every --tokens, or one each)
// with --context positions cached take one token each, and new prompts of --prompt-len (the
// last one shorter) fill the step to --tokens rows; a --tokens not above its --decode is a
// decode-only step of that many sequences (replayed from CUDA graphs on cuda).
//   Each strategy first runs one step whose logits are compared with sequential's (cpu: bitwise;
//   cuda: the largest difference relative to the largest logit, bf16 rounding expected), then
//   --iters timed steps (median of the slowest rank; every step after a barrier). Between steps
//   the decode sequences are truncated back to --context and the prompts released, so every step
//   is the same work.
//   Records: bench "sched", case "<model> tokens<T>[ decode]", impl "tessera <strategy>", with
//   tokens_per_s, host_us_per_layer (the step's launches on the host over the layers),
//   max_rel_diff and greedy_mismatches against sequential. --timeline PREFIX: one more step
//   per strategy with each operation timed on the stream it ran on (sched/timeline.h), written
//   as PREFIX.json (a Chrome trace) and PREFIX.svg (a lane per stream).
// cuda: LlamaGpuModel (bf16, one process per tensor-parallel rank); cpu: LlamaModel (float32,
// rank threads; the order changes, not the time).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "bench_record.h"
#include "bench_stats.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/error.h"
#include "tessera/model/decoder_presets.h"
#include "tessera/model/llama_gpu_model.h"
#include "tessera/model/llama_model.h"
#include "tessera/sched/rule.h"
#include "tessera/sched/schedule.h"
#include "tessera/sched/timeline.h"

namespace tessera::cli {
namespace {

using model::SequenceTokens;

struct SchedArgs {
  model::DecoderConfig config;
  std::vector<int64_t> tokens;
  std::vector<int64_t> decodes;  // per --tokens entry
  int64_t context = 0, prompt_len = 0, page = 16;
  int warmup = 2, iters = 10;
  uint64_t seed = 1;
  std::vector<std::string> strategies;
  std::string timeline;  // --timeline: the files' path prefix; empty: none
};

// The decode rows of case i (a.tokens[i] rows): at most its --decode.
int64_t step_decodes(const SchedArgs& a, size_t i) {
  return std::min(a.tokens[i], a.decodes[i]);
}

// The positions case i's sequences have cached: --context for each decode, none for prompts.
int64_t step_cached(const SchedArgs& a, size_t i) {
  return step_decodes(a, i) * a.context;
}

// Prompts of case i beside its decode rows.
std::vector<int64_t> prompt_lengths(const SchedArgs& a, size_t i) {
  std::vector<int64_t> out;
  for (int64_t left = a.tokens[i] - step_decodes(a, i); left > 0; left -= a.prompt_len)
    out.push_back(std::min(left, a.prompt_len));
  return out;
}

// The model behind one backend: what a step needs from it.
class SchedModel {
 public:
  virtual ~SchedModel() = default;
  virtual int64_t add_sequence() = 0;
  virtual void release(int64_t seq) = 0;
  virtual void truncate(int64_t seq, int64_t length) = 0;
  // Every input's last-row logits [inputs, V].
  virtual std::vector<float> logits(std::span<const SequenceTokens> in,
                                    const sched::Strategy* s) = 0;
  // A timed step: every input's next token (cuda: the argmax on the GPU).
  virtual void step(std::span<const SequenceTokens> in, const sched::Strategy* s) = 0;
  virtual double host_us() const = 0;  // the last step's launches
  virtual void set_timeline(sched::Timeline* timeline) = 0;
};

class CpuSchedModel final : public SchedModel {
 public:
  CpuSchedModel(const SchedArgs& a, RankContext& ctx, int64_t pages)
      : m_(a.config, model::random_llama_weights(a.config, a.seed, ctx.rank, ctx.size),
           {a.page, pages}, ctx.size > 1 ? ctx.world.get() : nullptr),
        vocab_(a.config.vocab_size) {}
  int64_t add_sequence() override { return m_.add_sequence(); }
  void release(int64_t seq) override { m_.release_sequence(seq); }
  void truncate(int64_t seq, int64_t length) override { m_.cache().truncate(seq, length); }
  std::vector<float> logits(std::span<const SequenceTokens> in, const sched::Strategy* s) override {
    return model::last_token_logits(s ? m_.forward(in, *s) : m_.forward(in), in, vocab_);
  }
  void step(std::span<const SequenceTokens> in, const sched::Strategy* s) override {
    const auto start = std::chrono::steady_clock::now();
    logits(in, s);
    host_us_ =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  }
  double host_us() const override { return host_us_; }
  void set_timeline(sched::Timeline* timeline) override { m_.set_timeline(timeline); }

 private:
  model::LlamaModel m_;
  int64_t vocab_;
  double host_us_ = 0;
};

class CudaSchedModel final : public SchedModel {
 public:
  CudaSchedModel(const SchedArgs& a, RankContext& ctx, const model::LlamaGpuOptions& o)
      : m_(a.config, model::random_llama_source(a.seed), o,
           ctx.size > 1 ? ctx.world.get() : nullptr) {}
  int64_t add_sequence() override { return m_.add_sequence(); }
  void release(int64_t seq) override { m_.release_sequence(seq); }
  void truncate(int64_t seq, int64_t length) override { m_.truncate(seq, length); }
  std::vector<float> logits(std::span<const SequenceTokens> in, const sched::Strategy* s) override {
    return m_.forward(in, model::LogitRows::kLast, s);
  }
  void step(std::span<const SequenceTokens> in, const sched::Strategy* s) override {
    m_.forward_greedy(in, s);
  }
  double host_us() const override { return m_.last_step_host_us(); }
  void set_timeline(sched::Timeline* timeline) override { m_.set_timeline(timeline); }

 private:
  model::LlamaGpuModel m_;
};

struct Measured {
  std::string strategy;
  std::string picked;  // auto: the strategy the rule ran
  double median_us = 0, host_us = 0, max_rel_diff = 0;
  int64_t mismatches = 0;
  sched::Timeline timeline;  // --timeline: one more step, timed per operation
};

std::vector<Measured> run_rank(const SchedArgs& a, RankContext& ctx, bool on_cuda) {
  int64_t most_rows = 0, most_inputs = 0, prompt_pages = 0, most_decodes = 0;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const auto prompts = prompt_lengths(a, i);
    most_rows = std::max(most_rows, a.tokens[i]);
    most_decodes = std::max(most_decodes, step_decodes(a, i));
    most_inputs = std::max(most_inputs, step_decodes(a, i) + int64_t(prompts.size()));
    int64_t pages = 0;
    for (int64_t p : prompts) pages += (p + a.page - 1) / a.page;
    prompt_pages = std::max(prompt_pages, pages);
  }
  const int64_t decode_pages = most_decodes * ((a.context + 1 + a.page - 1) / a.page);
  std::unique_ptr<SchedModel> m;
  if (on_cuda) {
    model::LlamaGpuOptions o;
    o.device = ctx.device.index;
    o.cache = {a.page, decode_pages + prompt_pages};
    o.max_tokens = std::max(most_rows, a.context);
    o.max_batch = std::max(most_inputs, most_decodes);
    o.max_context = std::max(a.context + 1, a.prompt_len);
    o.max_logit_rows = o.max_batch;
    try {
      m = std::make_unique<CudaSchedModel>(a, ctx, o);
    } catch (const Error& e) {
      // Most often the caches: name the options that size them.
      throw_error(e.code(), str("bench sched: the model of ", a.config.num_hidden_layers,
                                " --layers with caches for --decode ", most_decodes,
                                " sequences at --context ", a.context, ": ", e.what()));
    }
  } else {
    m = std::make_unique<CpuSchedModel>(a, ctx, decode_pages + prompt_pages);
  }
  std::mt19937_64 rng(a.seed);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(int32_t(rng() % uint64_t(a.config.vocab_size)));
    return out;
  };
  // The decode sequences' contexts, prefilled as many at a time as a step's rows allow.
  std::vector<SequenceTokens> decodes;
  const int64_t per_fill = std::max<int64_t>(1, std::max(most_rows, a.context) / a.context);
  for (int64_t s = 0; s < most_decodes; s += per_fill) {
    std::vector<SequenceTokens> fill;
    for (int64_t i = s; i < std::min(most_decodes, s + per_fill); ++i)
      fill.push_back({m->add_sequence(), random_tokens(a.context)});
    m->logits(fill, nullptr);
    for (auto& f : fill) decodes.push_back({f.seq_id, random_tokens(1)});
  }
  // The rule's measurements (auto), from TESSERA_SCHED_TUNE_TABLE or the user's cache.
  const sched::RuleKey rule_key{gpu_name(ctx), ctx.size, a.config.hidden_size};
  const std::vector<sched::SchedTuneEntry> rule_table =
      std::find(a.strategies.begin(), a.strategies.end(), "auto") != a.strategies.end()
          ? sched::read_sched_tune_table(sched::sched_tune_table_path())
          : std::vector<sched::SchedTuneEntry>{};
  std::vector<Measured> out;
  for (size_t c = 0; c < a.tokens.size(); ++c) {
    const int64_t t = a.tokens[c];
    // The case's prompts, the same for every strategy and step.
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t p : prompt_lengths(a, c)) prompts.push_back(random_tokens(p));
    // One step's inputs: the case's decode sequences, then new prompts.
    const size_t case_decodes = size_t(step_decodes(a, c));
    auto make_inputs = [&] {
      std::vector<SequenceTokens> in(decodes.begin(),
                                     decodes.begin() + std::ptrdiff_t(case_decodes));
      for (const auto& p : prompts) in.push_back({m->add_sequence(), p});
      return in;
    };
    auto reset = [&](const std::vector<SequenceTokens>& in) {
      for (size_t i = 0; i < in.size(); ++i) {
        if (i < case_decodes)
          m->truncate(in[i].seq_id, a.context);
        else
          m->release(in[i].seq_id);
      }
    };
    std::vector<float> reference;
    std::vector<int32_t> reference_tokens;
    for (const std::string& name : a.strategies) {
      const auto strategy = name == "auto" ? sched::make_rule_strategy(rule_key, rule_table)
                                           : sched::make_strategy(name);
      Measured r;
      r.strategy = name;
      std::vector<SequenceTokens> in = make_inputs();
      const std::vector<float> logits = m->logits(in, strategy.get());
      reset(in);
      const int64_t vocab = a.config.vocab_size;
      std::vector<int32_t> tokens;
      for (size_t i = 0; i + 1 <= logits.size() / size_t(vocab); ++i) {
        const auto row = logits.begin() + std::ptrdiff_t(i) * vocab;
        tokens.push_back(int32_t(std::max_element(row, row + vocab) - row));
      }
      if (reference.empty()) {
        reference = logits;
        reference_tokens = tokens;
      }
      float largest = 0, worst = 0;
      for (size_t i = 0; i < reference.size() && i < logits.size(); ++i) {
        largest = std::max(largest, std::fabs(reference[i]));
        worst = std::max(worst, std::fabs(logits[i] - reference[i]));
      }
      r.max_rel_diff = largest > 0 ? worst / largest : 0;
      for (size_t i = 0; i < tokens.size(); ++i) r.mismatches += tokens[i] != reference_tokens[i];
      std::vector<double> us, host;
      for (int i = 0; i < a.warmup + a.iters; ++i) {
        std::vector<SequenceTokens> step_in = make_inputs();
        if (ctx.world) ctx.world->barrier(ctx.stream);
        if (ctx.world) ctx.world->synchronize(ctx.stream);
        const auto start = std::chrono::steady_clock::now();
        m->step(step_in, strategy.get());
        const double elapsed =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
        reset(step_in);
        if (i < a.warmup) continue;
        us.push_back(elapsed);
        host.push_back(m->host_us());
      }
      if (!a.timeline.empty()) {
        // One more step with each operation timed (cuda: eagerly, not from a graph).
        std::vector<SequenceTokens> step_in = make_inputs();
        if (ctx.world) ctx.world->barrier(ctx.stream);
        m->set_timeline(&r.timeline);
        m->step(step_in, strategy.get());
        m->set_timeline(nullptr);
        reset(step_in);
      }
      if (name == "auto")
        r.picked = sched::pick_strategy(rule_table, rule_key, t, step_cached(a, c));
      r.median_us = max_across_ranks(ctx, median(us));
      r.host_us = max_across_ranks(ctx, median(host));
      out.push_back(r);
    }
  }
  return out;
}

int bench_sched(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt(
      "bench sched",
      {{"config", "",
        "config.json or a preset: tiny, llama3-8b, llama3-70b (default: llama3-8b "
        "on cuda, tiny on cpu)"},
       {"layers", "0", "decoder layers (0: the configuration's)"},
       {"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
       {"tp", "1", "tensor-parallel ranks (GPUs on cuda, rank threads on cpu)"},
       {"tokens", "",
        "comma list of rows per step (default 64,2048,4096,8192 on cuda, 4,96 on cpu)"},
       {"decode", "",
        "decode sequences per step: one count, or a comma list with one per --tokens (default 64 "
        "on cuda, 4 on cpu)"},
       {"context", "",
        "positions each decode sequence has cached (default 1024 on cuda, 24 on cpu)"},
       {"prompt-len", "", "length of the step's new prompts (default 512 on cuda, 20 on cpu)"},
       {"strategies", "all",
        "comma list of strategies (sequential, nanoflow, nanoflow:P[:W[:K]] with P the GEMMs' "
        "share of the SMs beside a decode attention, which takes the rest, W how many GEMMs "
        "after it keep that share (0: all), and K, when given, the cached positions that cost "
        "one row of GEMMs in a split by overlap cost, dual_batch, single_batch, single_batch:R "
        "with R rows a chunk, "
        "tokenweave, auto: the rule with the measured table), or all (every strategy but auto)"},
       {"warmup", "2", "untimed steps per case"},
       {"iters", "10", "timed steps per case (median reported)"},
       {"seed", "1", "seed of the random weights and tokens"},
       {"json", "", "write the records to this JSON file"},
       {"timeline", "",
        "after each strategy's timed steps, time one more per operation and write every "
        "strategy's per-stream timeline to PREFIX.json (a Chrome trace) and PREFIX.svg"},
       {"tune-table", "",
        "also write each case's strategy medians into this table, which the rule (auto) reads "
        "from TESSERA_SCHED_TUNE_TABLE"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  RankLaunch launch;
  launch.backend = opt.text("backend");
  launch.nranks = int(opt.integer("tp", 1, 64));
  launch.context.create_heap = false;
  const bool on_cuda = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  auto or_default = [&](const char* name, const char* cuda, const char* cpu) {
    return opt.text(name).empty() ? std::string(on_cuda ? cuda : cpu) : opt.text(name);
  };
  SchedArgs a;
  const std::string config_name = or_default("config", "llama3-8b", "tiny");
  a.config = model::load_decoder_config(config_name, "--config");
  const int64_t layers = opt.integer("layers", 0, 1 << 16);
  if (layers > 0) a.config.num_hidden_layers = layers;
  for (const std::string& t : Options::split(or_default("tokens", "64,2048,4096,8192", "4,96")))
    a.tokens.push_back(parse_integer(t, "--tokens", 1, 1 << 20));
  for (const std::string& d : Options::split(or_default("decode", "64", "4")))
    a.decodes.push_back(parse_integer(d, "--decode", 0, 1 << 16));
  TESSERA_CHECK_ARG(a.decodes.size() == 1 || a.decodes.size() == a.tokens.size(),
                    "--decode: ", a.decodes.size(), " counts for ", a.tokens.size(),
                    " --tokens entries: expected one, or one each");
  a.decodes.resize(a.tokens.size(), a.decodes[0]);
  a.context = parse_integer(or_default("context", "1024", "24"), "--context", 1, 1 << 20);
  a.prompt_len = parse_integer(or_default("prompt-len", "512", "20"), "--prompt-len", 1, 1 << 20);
  a.warmup = int(opt.integer("warmup", 0, 100000));
  a.iters = int(opt.integer("iters", 1, 100000));
  a.seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  a.strategies = opt.text("strategies") == "all" ? sched::strategy_names() : opt.list("strategies");
  a.timeline = opt.text("timeline");
  for (const std::string& s : a.strategies) (void)sched::make_named_strategy(s, {});  // checked
  // Sequential first: the reference the others are compared with.
  std::stable_partition(a.strategies.begin(), a.strategies.end(),
                        [](const std::string& s) { return s == "sequential"; });
  TESSERA_CHECK_ARG(!a.strategies.empty() && a.strategies[0] == "sequential",
                    "--strategies: expected sequential among them (the reference)");
  const std::string model_name = config_name + (layers > 0 ? str("-", layers, "l") : "");
  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    const std::vector<Measured> measured = run_rank(a, ctx, on_cuda);
    if (ctx.rank != 0) return;
    std::printf(
        "# tessera bench sched: %s, %lld layers, tp %d (%s), decodes at context %lld, "
        "prompts of %lld\n# %-38s %-14s %11s %10s %9s %9s %12s %9s\n",
        model_name.c_str(), static_cast<long long>(a.config.num_hidden_layers), ctx.size,
        on_cuda ? "cuda bf16" : "cpu f32", static_cast<long long>(a.context),
        static_cast<long long>(a.prompt_len), "case", "strategy", "median_us", "tokens/s", "vs_seq",
        "host_us/l", "max_rel_diff", "mismatch");
    std::vector<BenchRecord> records;
    std::vector<sched::SchedTuneEntry> tuned;
    std::vector<sched::Timeline> timelines;
    size_t i = 0;
    for (size_t c = 0; c < a.tokens.size(); ++c) {
      const int64_t t = a.tokens[c], d = step_decodes(a, c);
      const std::string name =
          str(model_name, " tokens", t, d == t ? " decode" : str(" decodes", d), " tp", ctx.size);
      double sequential_us = 0;
      for (size_t s = 0; s < a.strategies.size(); ++s, ++i) {
        const Measured& r = measured[i];
        if (r.strategy == "sequential") sequential_us = r.median_us;
        if (!a.timeline.empty()) {
          timelines.push_back(r.timeline);
          timelines.back().label = str(name, " ", r.strategy);
        }
        const double per_layer = r.host_us / double(a.config.num_hidden_layers);
        const double tokens_per_s = double(t) / (r.median_us * 1e-6);
        std::printf("  %-38s %-14s %11.1f %10.0f %8.3fx %9.2f %12.2e %9lld\n", name.c_str(),
                    r.strategy.c_str(), r.median_us, tokens_per_s, sequential_us / r.median_us,
                    per_layer, double(r.max_rel_diff), static_cast<long long>(r.mismatches));
        BenchRecord rec;
        rec.bench = "sched";
        rec.case_name = name;
        rec.impl = "tessera " + r.strategy;
        rec.gpu = gpu_name(ctx);
        rec.num_gpus = on_cuda ? ctx.size : 0;
        rec.topology = str("tp", ctx.size, on_cuda ? "" : " cpu");
        rec.median_us = r.median_us;
        // cpu: every order gives the same bits; cuda: within bf16 rounding of sequential.
        rec.ok = on_cuda ? r.max_rel_diff <= 0.02 : r.max_rel_diff == 0;
        rec.extra["tokens_per_s"] = tokens_per_s;
        rec.extra["host_us_per_layer"] = per_layer;
        rec.extra["max_rel_diff"] = r.max_rel_diff;
        rec.extra["greedy_mismatches"] = double(r.mismatches);
        rec.extra["vs_sequential"] = sequential_us / r.median_us;
        if (!r.picked.empty()) rec.extra_text["picked"] = r.picked;
        records.push_back(rec);
      }
      // The fastest strategy of the case named in --strategies, and how far the rule's pick ran
      // behind (or ahead of) it.
      const auto first = measured.begin() + std::ptrdiff_t(i - a.strategies.size());
      const auto last = measured.begin() + std::ptrdiff_t(i);
      const auto best = std::min_element(first, last, [](const Measured& x, const Measured& y) {
        return x.strategy != "auto" && (y.strategy == "auto" || x.median_us < y.median_us);
      });
      const auto rule =
          std::find_if(first, last, [](const Measured& x) { return x.strategy == "auto"; });
      std::printf("  # %s: fastest %s", name.c_str(), best->strategy.c_str());
      if (rule != last) {
        const double gap = 100.0 * (rule->median_us / best->median_us - 1.0);
        std::printf("; auto ran %s, %.1f%% %s it", rule->picked.c_str(), std::fabs(gap),
                    gap > 0 ? "behind" : "ahead of");
      }
      std::printf("\n");
      for (auto m = first; m != last; ++m) {
        if (m->strategy != "auto")
          tuned.push_back({gpu_name(ctx), ctx.size, a.config.hidden_size, t, m->strategy,
                           m->median_us, step_cached(a, c)});
      }
    }
    if (!opt.text("tune-table").empty()) {
      sched::write_sched_tune_table(opt.text("tune-table"), tuned);
      std::printf("# %zu measured rows written to the tuning table %s\n", tuned.size(),
                  opt.text("tune-table").c_str());
    }
    if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
    if (!a.timeline.empty()) {
      sched::write_timelines(a.timeline, timelines);
      std::printf(
          "# timelines of rank 0 (one step each): %s.json (chrome://tracing, "
          "ui.perfetto.dev) and %s.svg\n",
          a.timeline.c_str(), a.timeline.c_str());
    }
    const auto bad =
        std::count_if(records.begin(), records.end(), [](const BenchRecord& r) { return !r.ok; });
    if (bad != 0)
      throw_error(ErrorCode::kInternal,
                  str("bench sched: ", bad, " strategies differ from sequential beyond rounding"));
  });
}

const CommandRegistration kBenchSched(
    "bench sched", "scheduler strategies side by side on mixed decode + prefill steps, verified",
    bench_sched);

}  // namespace
}  // namespace tessera::cli
