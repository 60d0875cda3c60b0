// `tessera run dit`: one denoising step of a Flux.1 transformer (model/flux_dit.h) with its
// attention sequence parallel over cpu rank threads, under each --sp method side by side: the
// step's time (slowest rank) and the largest difference of every method's prediction from the
// first method's. Random weights from --seed unless --weights names diffusers safetensors;
// random latents, text states and pooled text unless --inputs names a safetensors file with
// image [L, in_channels], text [J, joint_attention_dim], pooled [pooled_projection_dim],
// timestep [1] and guidance [1] (bench/anchors/flux_dit_reference.py writes one beside
// diffusers' prediction); --output writes the first method's prediction [L, out] there. The
// model's CUDA layers are not built yet.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_record.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/error.h"
#include "tessera/model/flux_dit.h"
#include "tessera/model/model_config.h"
#include "tessera/model/safetensors.h"

namespace tessera::cli {
namespace {

// Presets: tiny (the tests' 2-block model) and flux (Flux.1-dev's dimensions; --blocks cuts).
model::FluxConfig flux_config(const std::string& name) {
  model::FluxConfig f;
  if (name == "tiny") {
    f.in_channels = f.out_channels = 8;
    f.num_layers = f.num_single_layers = 1;
    f.attention_head_dim = 16;
    f.num_attention_heads = 4;
    f.joint_attention_dim = 12;
    f.pooled_projection_dim = 10;
    f.guidance_embeds = true;
    f.axes_dims_rope = {4, 6, 6};
    return f;
  }
  if (name == "flux") {
    f.in_channels = f.out_channels = 64;
    f.num_layers = 19;
    f.num_single_layers = 38;
    f.attention_head_dim = 128;
    f.num_attention_heads = 24;
    f.joint_attention_dim = 4096;
    f.pooled_projection_dim = 768;
    f.guidance_embeds = true;
    f.axes_dims_rope = {16, 56, 56};
    return f;
  }
  TESSERA_CHECK(name != "cogvideox", ErrorCode::kUnsupported,
                "--model = cogvideox: its blocks are not built yet; expected tiny, flux or a "
                "Flux config.json");
  const model::ModelConfig config = model::read_model_config(name);
  TESSERA_CHECK_ARG(config.architecture == model::Architecture::kFlux, "--model = '", name,
                    "': a ", model::architecture_name(config.architecture),
                    " model: expected tiny, flux or a Flux config.json");
  return config.flux;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng() >> 40) * 0x1p-23f - 1.0f;  // [-1, 1), exact
  return v;
}

struct Inputs {
  int64_t seq = 0, text = 0;
  std::vector<float> image, text_states;
  model::FluxConditioning cond;
};

Inputs random_inputs(const model::FluxConfig& config, int64_t seq, int64_t text, uint64_t seed) {
  Inputs in;
  in.seq = seq;
  in.text = text;
  in.image = random_values(size_t(seq * config.in_channels), seed + 1);
  in.text_states = random_values(size_t(text * config.joint_attention_dim), seed + 2);
  in.cond = {0.5f, 3.5f, random_values(size_t(config.pooled_projection_dim), seed + 3)};
  return in;
}

// The tensors of --inputs, any float dtype, widened; shapes checked against the config.
Inputs read_inputs(const model::FluxConfig& config, const std::string& path) {
  const model::SafetensorsFile file = model::SafetensorsFile::open(path);
  auto get = [&](const char* name, int64_t cols) {
    const TensorView t = file.view(name);
    TESSERA_CHECK_ARG(t.numel() >= 1 && t.numel() % cols == 0, "--inputs ", path, ": ", name,
                      " has ", t.numel(), " values, expected a multiple of ", cols);
    std::vector<float> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_as_float(t.data(), t.dtype(), i);
    return v;
  };
  Inputs in;
  in.image = get("image", config.in_channels);
  in.text_states = get("text", config.joint_attention_dim);
  in.seq = int64_t(in.image.size()) / config.in_channels;
  in.text = int64_t(in.text_states.size()) / config.joint_attention_dim;
  in.cond.pooled = get("pooled", config.pooled_projection_dim);
  TESSERA_CHECK_ARG(int64_t(in.cond.pooled.size()) == config.pooled_projection_dim, "--inputs ",
                    path, ": pooled: expected pooled_projection_dim = ",
                    config.pooled_projection_dim, " values");
  in.cond.timestep = get("timestep", 1).front();
  if (config.guidance_embeds) in.cond.guidance = get("guidance", 1).front();
  return in;
}

int run_dit(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt("run dit",
              {{"model", "tiny", "tiny, flux (Flux.1-dev's dimensions) or a Flux config.json"},
               {"weights", "", "diffusers safetensors file or directory (default: random)"},
               {"blocks", "", "double,single blocks to run (default: the configuration's)"},
               {"seq", "256", "image tokens L (packed latent patches)"},
               {"grid-width", "0", "latent grid width W dividing L (0: the largest <= sqrt(L))"},
               {"text", "32", "text tokens J"},
               {"sp", "all", "comma list of ring, ulysses, usp, tas, torus, mesh, auto, or all"},
               {"nranks", "4", "sequence-parallel ranks (cpu rank threads)"},
               {"emulate-nodes", "1", "group the ranks into N emulated machines"},
               {"seed", "1", "seed of the random weights and inputs"},
               {"inputs", "", "safetensors file of image, text, pooled, timestep, guidance "
                              "(default: random; sets --seq and --text)"},
               {"output", "", "write the first method's prediction to this safetensors file"},
               {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  model::FluxConfig config = flux_config(opt.text("model"));
  if (!opt.text("blocks").empty()) {
    const auto blocks = opt.list("blocks");
    TESSERA_CHECK_ARG(blocks.size() == 2, "--blocks = '", opt.text("blocks"),
                      "': expected double,single (two counts)");
    config.num_layers = int64_t(parse_integer(blocks[0], "--blocks (double)", 0, 1 << 10));
    config.num_single_layers = int64_t(parse_integer(blocks[1], "--blocks (single)", 0, 1 << 10));
  }
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  Inputs in = opt.text("inputs").empty()
                  ? random_inputs(config, opt.integer("seq", 1, int64_t(1) << 24),
                                  opt.integer("text", 0, int64_t(1) << 20), seed)
                  : read_inputs(config, opt.text("inputs"));
  const int64_t seq = in.seq, text = in.text;
  int64_t width = opt.integer("grid-width", 0, seq);
  if (width == 0) {
    for (width = int64_t(std::sqrt(double(seq))); seq % width != 0; --width) {
    }
  }
  TESSERA_CHECK_ARG(seq % width == 0, "--grid-width = ", width, ": expected a divisor of --seq ",
                    seq);
  std::vector<sp::Method> methods;
  for (const std::string& m : opt.text("sp") == "all"
                                  ? std::vector<std::string>{"ring", "ulysses", "usp", "auto"}
                                  : opt.list("sp"))
    methods.push_back(sp::parse_method(m, "--sp"));
  const std::string weights_path = opt.text("weights");
  if (cuda_available())
    std::printf("# the DiT's CUDA layers are not built yet: running on the cpu backend\n");

  const model::FluxDitShape shape{seq, text, width};
  const std::vector<float>& image = in.image;
  const std::vector<float>& text_states = in.text_states;
  const model::FluxConditioning& cond = in.cond;
  const int64_t out_ch = config.patch_size * config.patch_size *
                         (config.out_channels > 0 ? config.out_channels : config.in_channels);
  RankLaunch launch;
  launch.backend = "cpu";
  launch.nranks = nranks_option(opt.text("nranks"));
  if (launch.nranks == 0) launch.nranks = 4;
  apply_emulation_options(int(opt.integer("emulate-nodes", 1, 4096)), "nic400", 0, -1,
                          launch.context);
  std::vector<float> first;  // the first method's prediction [L, out], by token
  std::vector<BenchRecord> records;
  std::printf("# tessera run dit: %s, %lld double + %lld single blocks, L %lld (%lld x %lld), "
              "J %lld, %d cpu ranks\n# %-10s %12s %14s  plan\n",
              opt.text("model").c_str(), static_cast<long long>(config.num_layers),
              static_cast<long long>(config.num_single_layers), static_cast<long long>(seq),
              static_cast<long long>(seq / width), static_cast<long long>(width),
              static_cast<long long>(text), launch.nranks, "method", "step_ms", "max_diff");
  int code = 0;
  for (sp::Method method : methods) {
    std::vector<float> prediction(size_t(seq * out_ch), 0.0f);
    std::mutex mutex;
    double step_s = 0;
    std::string plan;
    code = run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
      model::FluxDitWeights weights =
          weights_path.empty()
              ? model::random_flux_weights(config, seed)
              : model::load_flux_weights(config, model::WeightStore::open(weights_path));
      sp::PlanOptions options;
      options.method = method;
      model::FluxDit dit(config, std::move(weights), ctx, shape, options);
      std::vector<float> rows;
      for (int64_t t : dit.local_image_tokens())
        rows.insert(rows.end(), image.begin() + t * config.in_channels,
                    image.begin() + (t + 1) * config.in_channels);
      const auto start = std::chrono::steady_clock::now();
      const std::vector<float> out = dit.forward(rows, text_states, cond);
      const double s = max_across_ranks(
          ctx, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      std::lock_guard<std::mutex> lock(mutex);
      const std::vector<int64_t>& tokens = dit.local_image_tokens();
      for (size_t r = 0; r < tokens.size(); ++r)
        std::copy_n(out.begin() + int64_t(r) * out_ch, out_ch,
                    prediction.begin() + tokens[r] * out_ch);
      if (ctx.rank == 0) {
        step_s = s;
        plan = dit.attention_plan().summary();
      }
    });
    if (code != 0) return code;
    if (first.empty()) first = prediction;
    double max_diff = 0;
    for (size_t i = 0; i < prediction.size(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(prediction[i] - first[i])));
    std::printf("  %-10s %12.2f %14.3g  %s\n", sp::method_name(method), 1000.0 * step_s, max_diff,
                plan.c_str());
    BenchRecord rec;
    rec.bench = "dit";
    rec.case_name = str(opt.text("model"), " L", seq);
    rec.impl = str("tessera ", sp::method_name(method));
    rec.gpu = "cpu";
    rec.topology = str("1x", launch.nranks, " cpu");
    rec.median_us = 1e6 * step_s;
    rec.ok = max_diff <= 1e-3;
    rec.extra["max_diff_vs_first"] = max_diff;
    records.push_back(rec);
  }
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  if (!opt.text("output").empty()) {
    const std::vector<int64_t> dims = {seq, out_ch};
    const model::NamedTensor t{"prediction",
                               TensorView::contiguous(first.data(), DType::kF32, Device::cpu(),
                                                      dims.data(), 2)};
    model::write_safetensors(opt.text("output"), std::span<const model::NamedTensor>(&t, 1));
  }
  for (const BenchRecord& rec : records)
    TESSERA_CHECK(rec.ok, ErrorCode::kInternal, "run dit: ", rec.impl,
                  " differs from the first method by ", rec.extra.at("max_diff_vs_first"));
  return 0;
}

const CommandRegistration kRunDit(
    "run dit", "one Flux DiT denoising step, sequence parallel, each method side by side",
    run_dit);

}  // namespace
}  // namespace tessera::cli
