// `tessera run llm`: a Llama-family decoder (LlamaModel) end to end: B sequences of random
// prompt tokens prefilled together, then G greedy decode steps for all of them; prints the
// prefill latency, the time per output token and tokens/s, and writes --json (bench "llm").
// Tensor parallel over --tp rank threads of the cpu backend (float32 reference layers); the
// model's CUDA layers are not built yet, so a machine with a GPU runs the cpu backend too and
// says so. Weights: a --weights safetensors file or directory (Hugging Face names, each rank
// loading its shard), else random from --seed. --config: a config.json (file or directory), or
// a preset: tiny (2 layers, hidden 64) or llama3-8b (Llama-3-8B's dimensions; --layers cuts
// the stack, the float32 reference needs seconds per layer and token batch).
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <vector>

#include "bench_record.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/error.h"
#include "tessera/model/llama_model.h"
#include "tessera/model/model_config.h"
#include "tessera/model/safetensors.h"
#include "tessera/model/weight_store.h"
#include "tessera/runtime/memory.h"

namespace tessera::cli {
namespace {

model::DecoderConfig preset(const std::string& name) {
  model::DecoderConfig c;
  if (name == "tiny") {
    c.vocab_size = 97;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.max_position_embeddings = 4096;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    return c;
  }
  // Llama-3-8B (meta-llama/Meta-Llama-3-8B's config.json).
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  return c;
}

model::DecoderConfig load_config(const std::string& text) {
  if (text == "tiny" || text == "llama3-8b") return preset(text);
  const model::ModelConfig config = model::read_model_config(text);
  TESSERA_CHECK_ARG(config.is_decoder(), "--config = '", text, "': a ",
                    model::architecture_name(config.architecture),
                    " model: expected a Llama or Qwen2 decoder");
  return config.decoder;
}

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) best = row[i] > row[best] ? i : best;
  return int32_t(best);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run_llm(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt("run llm",
              {{"config", "tiny", "config.json (file or directory), or a preset: tiny, llama3-8b"},
               {"weights", "", "safetensors file or directory (default: random from --seed)"},
               {"layers", "0", "decoder layers to run (0: the configuration's)"},
               {"tp", "1", "tensor-parallel ranks (cpu rank threads)"},
               {"batch", "1", "sequences"},
               {"prompt-len", "16", "prompt tokens per sequence"},
               {"gen", "8", "greedy tokens generated per sequence"},
               {"page-size", "16", "KV cache page size (tokens)"},
               {"seed", "1", "seed of the random weights and prompt tokens"},
               {"prompt-tokens", "", "comma list of prompt token ids (batch 1; default: random)"},
               {"logits-out", "", "write sequence 0's prefill logits [prompt, vocab] and its "
                                  "generated tokens to this safetensors file"},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  model::DecoderConfig config = load_config(opt.text("config"));
  const int64_t layers = opt.integer("layers", 0, 1 << 16);
  if (layers > 0) config.num_hidden_layers = layers;
  const int tp = int(opt.integer("tp", 1, 64));
  std::vector<int32_t> given;
  for (const std::string& t : opt.text("prompt-tokens").empty() ? std::vector<std::string>{}
                                                                 : opt.list("prompt-tokens"))
    given.push_back(int32_t(parse_integer(t, "--prompt-tokens", 0, config.vocab_size - 1)));
  const int64_t batch = given.empty() ? opt.integer("batch", 1, 4096) : 1,
                prompt = given.empty() ? opt.integer("prompt-len", 1, 1 << 20) : int64_t(given.size()),
                gen = opt.integer("gen", 0, 1 << 20), page = opt.integer("page-size", 1, 1 << 16);
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  const std::string weights_path = opt.text("weights");
  if (cuda_available()) {
    std::printf("# the model's CUDA layers are not built yet: running on the cpu backend\n");
  }
  // Pages for every sequence's prompt and generated tokens, rounded up per sequence.
  const int64_t pages_per_seq = (prompt + gen + page - 1) / page;
  const model::KvCacheSize cache{page, batch * pages_per_seq};
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  std::mt19937_64 rng(seed);
  for (auto& p : prompts) {
    for (int64_t t = 0; t < prompt; ++t) p.push_back(int32_t(rng() % uint64_t(config.vocab_size)));
  }
  if (!given.empty()) prompts[0] = given;

  RankLaunch launch;
  launch.backend = "cpu";
  launch.nranks = tp;
  launch.context.create_heap = false;
  std::mutex print_mutex;
  std::vector<BenchRecord> records;
  const std::string model_name = opt.text("config") + (layers > 0 ? str("-", layers, "l") : "");
  const int code = run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    model::LlamaWeights weights =
        weights_path.empty()
            ? model::random_llama_weights(config, seed, ctx.rank, ctx.size)
            : model::load_llama_weights(config, model::WeightStore::open(weights_path), ctx.rank,
                                        ctx.size);
    model::LlamaModel m(config, std::move(weights), cache,
                        ctx.size > 1 ? ctx.world.get() : nullptr);
    std::vector<model::SequenceTokens> inputs;
    for (const auto& p : prompts) inputs.push_back({m.add_sequence(), p});
    const int64_t vocab = config.vocab_size;
    auto start = std::chrono::steady_clock::now();
    std::vector<float> logits = m.forward(inputs);
    const double prefill_s = max_across_ranks(ctx, seconds_since(start));
    const std::vector<float> prefill_logits(logits.begin(), logits.begin() + prompt * config.vocab_size);
    std::vector<std::vector<int32_t>> generated(static_cast<size_t>(batch));
    auto take_next = [&](bool after_prefill) {
      for (int64_t s = 0; s < batch; ++s) {
        const int64_t row = after_prefill ? (s + 1) * prompt - 1 : s;  // each sequence's last
        const int32_t next = argmax(logits.data() + row * vocab, vocab);
        generated[size_t(s)].push_back(next);
        inputs[size_t(s)].tokens = {next};
      }
    };
    take_next(true);
    start = std::chrono::steady_clock::now();
    for (int64_t step = 1; step < gen; ++step) {
      logits = m.forward(inputs);
      take_next(false);
      if (ctx.rank == 0 && step % 8 == 0) {
        std::lock_guard<std::mutex> lock(print_mutex);
        std::printf("# decode step %lld of %lld\n", static_cast<long long>(step),
                    static_cast<long long>(gen - 1));
      }
    }
    const double decode_s = max_across_ranks(ctx, seconds_since(start));
    if (ctx.rank != 0) return;
    const int64_t steps = gen > 1 ? gen - 1 : 0;
    const double tpot_ms = steps > 0 ? 1000.0 * decode_s / double(steps) : 0;
    const double tokens_per_s = steps > 0 ? double(batch * steps) / decode_s : 0;
    std::printf(
        "# tessera run llm: %s, %lld layers, tp %d (cpu), batch %lld, prompt %lld, gen %lld\n",
        model_name.c_str(), static_cast<long long>(config.num_hidden_layers), tp,
        static_cast<long long>(batch), static_cast<long long>(prompt), static_cast<long long>(gen));
    std::printf(
        "  prefill          %10.2f ms\n  per output token %10.2f ms\n  decode tokens/s  %10.1f\n",
        1000.0 * prefill_s, tpot_ms, tokens_per_s);
    std::printf("  sequence 0 generated:");
    for (int32_t t : generated[0]) std::printf(" %d", t);
    std::printf("\n");
    if (!opt.text("logits-out").empty()) {
      const std::vector<int64_t> logits_dims = {prompt, vocab};
      const std::vector<int64_t> token_dims = {int64_t(generated[0].size())};
      const std::vector<model::NamedTensor> out = {
          {"prefill_logits", TensorView::contiguous(const_cast<float*>(prefill_logits.data()),
                                                    DType::kF32, Device::cpu(),
                                                    logits_dims.data(), 2)},
          {"generated", TensorView::contiguous(generated[0].data(), DType::kI32, Device::cpu(),
                                               token_dims.data(), 1)}};
      model::write_safetensors(opt.text("logits-out"), out);
    }
    for (const bool prefill : {true, false}) {
      BenchRecord rec;
      rec.bench = "llm";
      rec.case_name =
          str(model_name, " b", batch, " ctx", prompt, prefill ? " prefill" : " decode");
      rec.impl = "tessera";
      rec.gpu = "cpu";
      rec.num_gpus = 0;
      rec.topology = str("tp", tp, " cpu");
      rec.median_us = prefill ? 1e6 * prefill_s : 1000.0 * tpot_ms;
      rec.ok = true;
      if (!prefill) rec.extra["tokens_per_s"] = tokens_per_s;
      records.push_back(rec);
    }
  });
  if (code == 0 && !opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  return code;
}

const CommandRegistration kRunLlm(
    "run llm", "a Llama-family decoder end to end: prefill, greedy decode, latency", run_llm);

}  // namespace
}  // namespace tessera::cli
