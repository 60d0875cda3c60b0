// `tessera run dit`: one step of a DiT with its attention sequence parallel, under each --sp
// method side by side: the step's time (slowest rank) and the largest difference of every
// method's output from the first method's.
//   cuda: model/flux_transformer.h or model/cogvideox_transformer.h in bf16 or f16, one process
//   per GPU; the run fails when a method differs from the first by more than 2% of the largest
//   output.
//   cpu: the float32 layer code on rank threads; the run fails past 1e-3.
//   Flux (model/flux_dit.h): the whole transformer, one denoising step.
//   CogVideoX (model/cogvideox_block.h on cpu): its transformer blocks on embedded video and
//   text tokens (the patch embedding, positional embeddings and output head are not built).
// Random weights from --seed unless --weights names diffusers safetensors; random inputs unless
// --inputs names a safetensors file with Flux's image [L, in_channels], text [J,
// joint_attention_dim], pooled [pooled_projection_dim], timestep [1], guidance [1], or
// CogVideoX's hidden [L, C], encoder [J, C], temb [time_embed_dim] (the scripts
// bench/anchors/flux_dit_reference.py and cogvideox_reference.py write them beside diffusers'
// output); --output writes the first method's output [L, out] there as "prediction".
#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_record.h"
#include "command.h"
#include "options.h"
#include "rank_launch.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/runtime/memory.h"
#include "tessera/model/cogvideox_block.h"
#include "tessera/model/cogvideox_transformer.h"
#include "tessera/model/flux_dit.h"
#include "tessera/model/flux_transformer.h"
#include "tessera/model/model_config.h"
#include "tessera/model/safetensors.h"

namespace tessera::cli {
namespace {

// The DiT configurations: presets (tiny: the tests' models; flux: Flux.1-dev's dimensions;
// cogvideox: CogVideoX-2B's; --blocks cuts) or a diffusers config.json.
model::ModelConfig dit_config(const std::string& name) {
  model::ModelConfig m;
  if (name == "tiny" || name == "flux") {
    m.architecture = model::Architecture::kFlux;
    model::FluxConfig& f = m.flux;
    const bool tiny = name == "tiny";
    f.in_channels = f.out_channels = tiny ? 8 : 64;
    f.num_layers = tiny ? 1 : 19;
    f.num_single_layers = tiny ? 1 : 38;
    f.attention_head_dim = tiny ? 16 : 128;
    f.num_attention_heads = tiny ? 4 : 24;
    f.joint_attention_dim = tiny ? 12 : 4096;
    f.pooled_projection_dim = tiny ? 10 : 768;
    f.guidance_embeds = true;
    f.axes_dims_rope = tiny ? std::vector<int64_t>{4, 6, 6} : std::vector<int64_t>{16, 56, 56};
    return m;
  }
  if (name == "cogvideox-tiny" || name == "cogvideox") {
    m.architecture = model::Architecture::kCogVideoX;
    model::CogVideoXConfig& c = m.cogvideox;
    const bool tiny = name == "cogvideox-tiny";
    c.num_attention_heads = tiny ? 4 : 30;
    c.attention_head_dim = tiny ? 16 : 64;
    c.num_layers = tiny ? 2 : 30;
    c.time_embed_dim = tiny ? 24 : 512;
    c.text_embed_dim = tiny ? 12 : 4096;
    c.in_channels = c.out_channels = 16;
    return m;
  }
  m = model::read_model_config(name);
  TESSERA_CHECK_ARG(m.architecture == model::Architecture::kFlux ||
                        m.architecture == model::Architecture::kCogVideoX,
                    "--model = '", name, "': a ", model::architecture_name(m.architecture),
                    " model: expected tiny, flux, cogvideox-tiny, cogvideox or a Flux or "
                    "CogVideoX config.json");
  return m;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = float(rng() >> 40) * 0x1p-23f - 1.0f;  // [-1, 1), exact
  return v;
}

// A tensor of --inputs, any float dtype, widened; a multiple of `cols` values.
std::vector<float> input_tensor(const model::SafetensorsFile& file, const char* name,
                                int64_t cols) {
  const TensorView t = file.view(name);
  TESSERA_CHECK_ARG(t.numel() >= 1 && t.numel() % cols == 0, "--inputs ", file.path(), ": ",
                    name, " has ", t.numel(), " values, expected a multiple of ", cols);
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_as_float(t.data(), t.dtype(), i);
  return v;
}

// One model's step on a rank: this rank's output rows, the image tokens they are, and the
// attention plan's summary. A StepFn builds the model on a rank (untimed) and returns the step.
struct RankStep {
  std::vector<float> rows;
  std::vector<int64_t> tokens;
  std::string plan;
};
using StepFn =
    std::function<std::function<RankStep()>(RankContext& ctx, const sp::PlanOptions& options)>;

// Gathers `x` rows [L, cols] at `tokens`.
std::vector<float> rows_at(const std::vector<float>& x, int64_t cols,
                           const std::vector<int64_t>& tokens) {
  std::vector<float> rows;
  for (int64_t t : tokens) rows.insert(rows.end(), x.begin() + t * cols, x.begin() + (t + 1) * cols);
  return rows;
}

// A Flux step's configuration (--blocks applied), shape and inputs, random or from --inputs.
struct FluxInputs {
  model::FluxConfig config;
  model::FluxDitShape shape;
  std::vector<float> image, text;  // [L, in_channels], [J, joint_attention_dim]
  model::FluxConditioning cond;
  int64_t out_cols = 0;
  std::string summary;
};

FluxInputs flux_inputs(const Options& opt, model::FluxConfig config) {
  if (!opt.text("blocks").empty()) {
    const auto blocks = opt.list("blocks");
    TESSERA_CHECK_ARG(blocks.size() == 2, "--blocks = '", opt.text("blocks"),
                      "': expected double,single (two counts) for Flux");
    config.num_layers = parse_integer(blocks[0], "--blocks (double)", 0, 1 << 10);
    config.num_single_layers = parse_integer(blocks[1], "--blocks (single)", 0, 1 << 10);
  }
  FluxInputs in;
  in.config = config;
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  int64_t seq = 0;
  if (opt.text("inputs").empty()) {
    seq = opt.integer("seq", 1, int64_t(1) << 24);
    in.image = random_values(size_t(seq * config.in_channels), seed + 1);
    in.text = random_values(size_t(opt.integer("text", 0, int64_t(1) << 20) *
                                   config.joint_attention_dim),
                            seed + 2);
    in.cond = {0.5f, 3.5f, random_values(size_t(config.pooled_projection_dim), seed + 3)};
  } else {
    const model::SafetensorsFile file = model::SafetensorsFile::open(opt.text("inputs"));
    in.image = input_tensor(file, "image", config.in_channels);
    in.text = input_tensor(file, "text", config.joint_attention_dim);
    seq = int64_t(in.image.size()) / config.in_channels;
    in.cond.pooled = input_tensor(file, "pooled", config.pooled_projection_dim);
    TESSERA_CHECK_ARG(int64_t(in.cond.pooled.size()) == config.pooled_projection_dim, "--inputs: "
                      "pooled: expected pooled_projection_dim = ", config.pooled_projection_dim,
                      " values");
    in.cond.timestep = input_tensor(file, "timestep", 1).front();
    if (config.guidance_embeds) in.cond.guidance = input_tensor(file, "guidance", 1).front();
  }
  const int64_t j = int64_t(in.text.size()) / config.joint_attention_dim;
  int64_t width = opt.integer("grid-width", 0, seq);
  if (width == 0) {
    for (width = int64_t(std::sqrt(double(seq))); seq % width != 0; --width) {
    }
  }
  TESSERA_CHECK_ARG(seq % width == 0, "--grid-width = ", width, ": expected a divisor of the ",
                    seq, " image tokens");
  in.shape = {seq, j, width};
  in.out_cols = config.patch_size * config.patch_size *
                (config.out_channels > 0 ? config.out_channels : config.in_channels);
  in.summary = str("Flux, ", config.num_layers, " double + ", config.num_single_layers,
                        " single blocks, L ", seq, " (", seq / width, " x ", width, "), J ", j);
  return in;
}

StepFn flux_step(const Options& opt, const FluxInputs& inputs) {
  auto in = std::make_shared<FluxInputs>(inputs);
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  const std::string weights = opt.text("weights");
  return [=](RankContext& ctx, const sp::PlanOptions& options) {
    auto dit = std::make_shared<model::FluxDit>(
        in->config,
        weights.empty() ? model::random_flux_weights(in->config, seed)
                        : model::load_flux_weights(in->config, model::WeightStore::open(weights)),
        ctx, in->shape, options);
    return std::function<RankStep()>([=] {
      RankStep r;
      r.tokens = dit->local_image_tokens();
      r.rows = dit->forward(rows_at(in->image, in->config.in_channels, r.tokens), in->text, in->cond);
      r.plan = dit->attention_plan().summary();
      return r;
    });
  };
}

// CogVideoX's inputs: the config (--blocks applied), embedded video and text rows and temb,
// random from --seed or read from --inputs.
struct CogVideoXInputs {
  model::CogVideoXConfig config;
  std::vector<float> hidden, encoder, temb;  // [L, C], [J, C], [time_embed_dim]
  int64_t seq = 0, text = 0;
  std::string summary;
};

CogVideoXInputs cogvideox_inputs(const Options& opt, model::CogVideoXConfig config) {
  TESSERA_CHECK(!config.use_rotary_positional_embeddings, ErrorCode::kUnsupported,
                "CogVideoX with use_rotary_positional_embeddings: its 3-D RoPE tables are not "
                "built yet; expected a configuration without them (CogVideoX-2B's)");
  if (!opt.text("blocks").empty())
    config.num_layers = parse_integer(opt.text("blocks"), "--blocks (CogVideoX)", 0, 1 << 10);
  const int64_t c = config.inner_dim(), t = config.time_embed_dim;
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  CogVideoXInputs in;
  in.config = config;
  if (opt.text("inputs").empty()) {
    in.seq = opt.integer("seq", 1, int64_t(1) << 24);
    in.hidden = random_values(size_t(in.seq * c), seed + 1);
    in.encoder = random_values(size_t(opt.integer("text", 0, int64_t(1) << 20) * c), seed + 2);
    in.temb = random_values(size_t(t), seed + 3);
  } else {
    const model::SafetensorsFile file = model::SafetensorsFile::open(opt.text("inputs"));
    in.hidden = input_tensor(file, "hidden", c);
    in.encoder = input_tensor(file, "encoder", c);
    in.temb = input_tensor(file, "temb", t);
    in.seq = int64_t(in.hidden.size()) / c;
    TESSERA_CHECK_ARG(int64_t(in.temb.size()) == t, "--inputs: temb: expected time_embed_dim = ",
                      t, " values");
  }
  in.text = int64_t(in.encoder.size()) / c;
  in.summary = str("CogVideoX blocks, ", config.num_layers, " blocks, L ", in.seq, ", J ", in.text);
  return in;
}

StepFn cogvideox_step(const Options& opt, const CogVideoXInputs& inputs) {
  const model::CogVideoXConfig config = inputs.config;
  const int64_t c = config.inner_dim(), seq = inputs.seq, j = inputs.text;
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  auto hidden = std::make_shared<std::vector<float>>(inputs.hidden);
  auto encoder = std::make_shared<std::vector<float>>(inputs.encoder);
  auto temb = std::make_shared<std::vector<float>>(inputs.temb);
  const std::string weights = opt.text("weights");
  return [=](RankContext& ctx, const sp::PlanOptions& options) {
    std::shared_ptr<sp::SpAttention> attention = sp::SpAttention::create(
        ctx, sp::joint_attention_request(seq, j, config.num_attention_heads,
                                         config.attention_head_dim, DType::kF32, options));
    auto blocks = std::make_shared<std::vector<model::CogVideoXBlock>>();
    const model::WeightStore store =
        weights.empty() ? model::WeightStore() : model::WeightStore::open(weights);
    for (int64_t i = 0; i < config.num_layers; ++i) {
      blocks->emplace_back(config,
                           weights.empty() ? model::random_cogvideox_block(config, i, seed)
                                           : model::load_cogvideox_block(config, i, store),
                           *attention);
    }
    return std::function<RankStep()>([=] {
      RankStep r;
      r.tokens = attention->local_sequence_tokens();
      r.rows = rows_at(*hidden, c, r.tokens);
      std::vector<float> text = *encoder;
      for (const model::CogVideoXBlock& b : *blocks) b.forward(r.rows, text, *temb, {}, {});
      r.plan = attention->plan().summary();
      return r;
    });
  };
}

// Writes --json, and --output with the first method's prediction [seq, cols]; then fails when a
// method's output differed from the first's beyond its record's bound.
void finish(const Options& opt, const std::vector<BenchRecord>& records, std::vector<float>& first,
            int64_t seq, int64_t cols) {
  if (!opt.text("json").empty()) write_bench_json(opt.text("json"), records);
  if (!opt.text("output").empty()) {
    const std::vector<int64_t> dims = {seq, cols};
    const model::NamedTensor t{"prediction", TensorView::contiguous(first.data(), DType::kF32,
                                                                    Device::cpu(), dims.data(), 2)};
    model::write_safetensors(opt.text("output"), std::span<const model::NamedTensor>(&t, 1));
  }
  for (const BenchRecord& rec : records)
    TESSERA_CHECK(rec.ok, ErrorCode::kInternal, "run dit: ", rec.impl,
                  " differs from the first method by ", rec.extra.at("max_diff_vs_first"));
}

// Rows [n, cols] of floats as `dtype` in a new device tensor (and back).
Tensor to_device(const std::vector<float>& v, int64_t n, int64_t cols, DType dtype,
                 const RankContext& ctx) {
  Tensor t = Tensor::empty({n, cols}, dtype, ctx.device);
  std::vector<std::byte> bytes(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) store_from_float(bytes.data(), dtype, int64_t(i), v[i]);
  copy_bytes(t.data(), bytes.data(), bytes.size(), ctx.stream);
  ctx.stream.synchronize();
  return t;
}
std::vector<float> to_host(const Tensor& t, const RankContext& ctx) {
  std::vector<std::byte> bytes(t.view().span_bytes());
  copy_bytes(bytes.data(), t.data(), bytes.size(), ctx.stream);
  ctx.stream.synchronize();
  std::vector<float> v(size_t(t.view().numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(bytes.data(), t.view().dtype(), int64_t(i));
  return v;
}

// Every rank's rows [tokens, cols] placed by token into the whole [L, cols] prediction, on every
// rank (through the bootstrap: each rank sends its token ids and rows, padded to the most rows).
std::vector<float> gather_prediction(RankContext& ctx, const std::vector<int64_t>& tokens,
                                     const std::vector<float>& rows, int64_t cols, int64_t seq) {
  const int64_t most = int64_t(max_across_ranks(ctx, double(tokens.size())));
  const size_t record = size_t(1 + cols);
  std::vector<double> mine(size_t(most) * record, -1.0), all(mine.size() * size_t(ctx.size));
  for (size_t r = 0; r < tokens.size(); ++r) {
    mine[r * record] = double(tokens[r]);
    for (int64_t c = 0; c < cols; ++c) mine[r * record + 1 + size_t(c)] = rows[r * size_t(cols) + size_t(c)];
  }
  ctx.bootstrap->allgather(mine.data(), all.data(), mine.size() * sizeof(double));
  std::vector<float> out(size_t(seq * cols), 0.0f);
  for (size_t r = 0; r < all.size() / record; ++r) {
    const double token = all[r * record];
    if (token < 0) continue;  // padding
    for (int64_t c = 0; c < cols; ++c)
      out[size_t(token) * size_t(cols) + size_t(c)] = float(all[r * record + 1 + size_t(c)]);
  }
  return out;
}

// What one --sp method runs on a cuda rank: this rank's token order, a step (enqueued), and the
// rank's output rows [tokens, cols] after it.
struct MethodStep {
  std::vector<int64_t> tokens;
  std::function<void()> step;
  std::function<std::vector<float>()> output;
  std::string plan;
};

// Seconds on the host clock since `start`.
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// time_methods' `replan` for a device-tensor DiT (FluxTransformer, CogVideoXTransformer): its
// attention planned again with `options` for another method.
template <typename Dit>
std::function<void(sp::Method)> replanner(Dit& dit, sp::PlanOptions& options) {
  return [&dit, &options](sp::Method method) {
    options.method = method;
    dit.replan_attention(options);
  };
}

// The cuda runs' method loop, once the model is loaded (in load_s seconds, planned for the first
// method): for each method (`replan` switches to it from the second on), the step `prepare`
// gives timed --iters times after an untimed one (host clock around the step and a stream
// synchronize, slowest rank), the prediction gathered and compared with the first method's,
// printed and recorded; then finish().
void time_methods(const Options& opt, RankContext& ctx, const std::vector<sp::Method>& methods,
                  int64_t seq, int64_t cols, DType dtype, double weights_gb, double load_s,
                  const std::function<void(sp::Method)>& replan,
                  const std::function<MethodStep()>& prepare) {
  if (ctx.rank == 0)
    std::printf("# weights ready in %.1f s\n# %-10s %12s %14s  plan\n", load_s, "method",
                "step_ms", "max_diff");
  const int iters = int(opt.integer("iters", 1, 1000));
  std::vector<float> first;
  std::vector<BenchRecord> records;
  for (size_t m = 0; m < methods.size(); ++m) {
    if (m > 0) replan(methods[m]);
    const MethodStep run = prepare();
    std::vector<double> times;
    for (int it = 0; it <= iters; ++it) {
      const auto start = std::chrono::steady_clock::now();
      run.step();
      ctx.stream.synchronize();
      if (it > 0) times.push_back(seconds_since(start));
    }
    std::sort(times.begin(), times.end());
    const double step_s = max_across_ranks(ctx, times[times.size() / 2]);
    const std::vector<float> prediction =
        gather_prediction(ctx, run.tokens, run.output(), cols, seq);
    if (first.empty()) first = prediction;
    double max_diff = 0, largest = 0;
    for (size_t i = 0; i < prediction.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(prediction[i] - first[i])));
      largest = std::max(largest, double(std::fabs(first[i])));
    }
    if (ctx.rank != 0) continue;
    std::printf("  %-10s %12.2f %14.3g  %s\n", sp::method_name(methods[m]), 1000.0 * step_s,
                max_diff, run.plan.c_str());
    BenchRecord rec;
    rec.bench = "dit";
    rec.case_name = str(opt.text("model"), " L", seq);
    rec.impl = str("tessera ", sp::method_name(methods[m]));
    rec.gpu = gpu_name(ctx);
    rec.num_gpus = ctx.size;
    rec.topology = topology_label(ctx.topology);
    rec.median_us = 1e6 * step_s;
    // Methods reorder the attention's sums: they agree within the dtype's rounding.
    rec.ok = max_diff <= 0.02 * largest;
    rec.extra["max_diff_vs_first"] = max_diff;
    rec.extra["weights_gb"] = weights_gb;
    rec.extra_text["dtype"] = dtype_name(dtype);
    records.push_back(rec);
  }
  if (ctx.rank == 0) finish(opt, records, first, seq, cols);
}

DType cuda_dtype(const Options& opt) {
  const std::string dtype_text = opt.text("dtype");
  TESSERA_CHECK_ARG(dtype_text == "bf16" || dtype_text == "f16", "--dtype = '", dtype_text,
                    "': expected bf16 or f16 on the cuda backend");
  return dtype_text == "bf16" ? DType::kBF16 : DType::kF16;
}

// Refuses (naming --seq) a run whose weights and step activations (11 C values a row, for every
// text row and an even share of the L video or image rows) do not fit a GPU.
void check_dit_fits(const RankLaunch& launch, size_t weight_values, int64_t seq, int64_t text,
                    int64_t c, DType dtype) {
  const int ranks = launch.nranks > 0 ? launch.nranks : std::max(1, cuda_device_count());
  const size_t rows = size_t(text) + size_t((seq + ranks - 1) / ranks);
  check_memory_fits(launch,
                    saturating_product({weight_values + saturating_product({rows, size_t(11),
                                                                            size_t(c)}),
                                        dtype_size(dtype)}),
                    "--seq", std::to_string(seq), "the weights and the step's activations");
}

// Rank 0 announces the run; every rank opens --weights (or gets null: random weights).
std::unique_ptr<model::WeightStore> open_weights(const Options& opt, const RankContext& ctx,
                                                 const std::string& summary, DType dtype,
                                                 size_t weight_values) {
  if (ctx.rank == 0)
    std::printf("# tessera run dit: %s, %s on %d GPUs (%s)\n# loading %.2f G weights ...\n",
                opt.text("model").c_str(), summary.c_str(), ctx.size, dtype_name(dtype),
                double(weight_values) * 1e-9);
  std::fflush(stdout);
  const std::string weights = opt.text("weights");
  if (weights.empty()) return nullptr;
  return std::make_unique<model::WeightStore>(model::WeightStore::open(weights));
}

// `run dit` for Flux on the cuda backend: one process per GPU, FluxTransformer in bf16/f16, its
// weights uploaded once and the attention replanned per method.
int run_flux_cuda(const Options& opt, const FluxInputs& in, const std::vector<sp::Method>& methods,
                  RankLaunch launch, int argc, char** argv) {
  const DType dtype = cuda_dtype(opt);
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  const int64_t seq = in.shape.image_tokens, j = in.shape.text_tokens, cols = in.out_cols;
  const model::FluxConfig& f = in.config;
  size_t weight_values = 0;
  for (const model::FluxTensorInfo& t : model::flux_tensor_names(f)) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= size_t(d);
    weight_values += n;
  }
  // The step's activations: hidden, normed, qkv, attention, mlp, a temporary.
  check_dit_fits(launch, weight_values, seq, j, f.inner_dim(), dtype);
  launch.context.create_heap = true;
  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    const auto store = open_weights(opt, ctx, in.summary, dtype, weight_values);
    sp::PlanOptions options;
    options.method = methods.front();
    const auto load_start = std::chrono::steady_clock::now();
    model::FluxTransformer dit(f, store ? model::store_flux_source(*store) : model::random_flux_source(seed),
                               ctx, in.shape, dtype, options);
    const double load_s = seconds_since(load_start);
    const Tensor text = j > 0 ? to_device(in.text, j, f.joint_attention_dim, dtype, ctx) : Tensor();
    Tensor image, out;
    time_methods(opt, ctx, methods, seq, cols, dtype, double(dit.weight_bytes()) * 1e-9, load_s,
                 replanner(dit, options), [&] {
                   const std::vector<int64_t>& tokens = dit.local_image_tokens();
                   const int64_t n = int64_t(tokens.size());
                   image = to_device(rows_at(in.image, f.in_channels, tokens), n, f.in_channels,
                                     dtype, ctx);
                   out = Tensor::empty({n, cols}, dtype, ctx.device);
                   auto step = [&] { dit.forward(image, text.view(), in.cond, out, ctx.stream); };
                   return MethodStep{tokens, step,
                                     [&] { return to_host(out, ctx); },
                                     dit.attention_plan().summary()};
                 });
  });
}

// `run dit` for CogVideoX's blocks on the cuda backend, as for Flux: CogVideoXTransformer in
// bf16/f16. Its blocks update the rows in place, so each step starts from a copy of the inputs
// (a device-to-device copy inside the timed step).
int run_cogvideox_cuda(const Options& opt, const CogVideoXInputs& in,
                       const std::vector<sp::Method>& methods, RankLaunch launch, int argc,
                       char** argv) {
  const DType dtype = cuda_dtype(opt);
  const uint64_t seed = uint64_t(opt.integer("seed", 0, int64_t(1) << 62));
  const model::CogVideoXConfig& f = in.config;
  const int64_t c = f.inner_dim(), seq = in.seq, j = in.text;
  // A block: its adaLN linears (12 C x time_embed_dim), q/k/v/out (4 C^2), the feed-forward
  // (8 C^2), biases and norms. The step's activations: hidden, normed, q, k, v, attention, mlp,
  // a temporary.
  const size_t weight_values = size_t(f.num_layers) *
                               size_t(12 * c * f.time_embed_dim + 12 * c * c + 32 * c);
  check_dit_fits(launch, weight_values, seq, j, c, dtype);
  launch.context.create_heap = true;
  return run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
    const auto store = open_weights(opt, ctx, in.summary, dtype, weight_values);
    sp::PlanOptions options;
    options.method = methods.front();
    const auto load_start = std::chrono::steady_clock::now();
    model::CogVideoXTransformer dit(
        f,
        [&](int64_t i) {
          return store ? model::load_cogvideox_block(f, i, *store)
                       : model::random_cogvideox_block(f, i, seed);
        },
        ctx, seq, j, dtype, options);
    const double load_s = seconds_since(load_start);
    const Tensor text_in = j > 0 ? to_device(in.encoder, j, c, dtype, ctx) : Tensor();
    const Tensor text = j > 0 ? Tensor::empty({j, c}, dtype, ctx.device) : Tensor();
    Tensor video_in, video;
    const size_t e = dtype_size(dtype);
    time_methods(opt, ctx, methods, seq, c, dtype, double(dit.weight_bytes()) * 1e-9, load_s,
                 replanner(dit, options), [&] {
                   const std::vector<int64_t>& tokens = dit.local_video_tokens();
                   const int64_t n = int64_t(tokens.size());
                   video_in = to_device(rows_at(in.hidden, c, tokens), n, c, dtype, ctx);
                   video = Tensor::empty({n, c}, dtype, ctx.device);
                   auto step = [&, n] {
                     copy_bytes(video.data(), video_in.data(), size_t(n * c) * e, ctx.stream);
                     if (j > 0)
                       copy_bytes(text.data(), text_in.data(), size_t(j * c) * e, ctx.stream);
                     dit.forward(video, text.view(), in.temb, ctx.stream);
                   };
                   return MethodStep{tokens, step, [&] { return to_host(video, ctx); },
                                     dit.attention_plan().summary()};
                 });
  });
}

int run_dit(const std::vector<std::string>& args, int argc, char** argv) {
  Options opt(
      "run dit",
      {{"model", "tiny",
        "tiny, flux (Flux.1-dev's dimensions), cogvideox-tiny, cogvideox (CogVideoX-2B's) or a "
        "diffusers config.json"},
       {"weights", "", "diffusers safetensors file or directory (default: random)"},
       {"blocks", "", "Flux: double,single blocks; CogVideoX: blocks (default: the config's)"},
       {"seq", "256", "image (video) tokens L"},
       {"grid-width", "0", "Flux: latent grid width W dividing L (0: the largest <= sqrt(L))"},
       {"text", "32", "text tokens J"},
       {"sp", "all", "comma list of ring, ulysses, usp, tas, torus, mesh, auto, or all"},
       {"backend", "auto", "cuda, cpu or auto (cuda when a GPU is visible)"},
       {"nranks", "", "sequence-parallel ranks (cuda: GPUs, default every visible one; cpu: rank "
                      "threads, default 4)"},
       {"dtype", "bf16", "cuda: bf16 or f16 (the cpu backend runs f32)"},
       {"iters", "3", "cuda: timed steps per method (after one untimed)"},
       {"emulate-nodes", "1", "group the ranks into N emulated machines"},
       {"seed", "1", "seed of the random weights and inputs"},
       {"inputs", "", "safetensors file of the model's inputs (default: random; sets --seq, --text)"},
       {"output", "", "write the first method's output to this safetensors file"},
       {"json", "", "write the records to this JSON file"}});
  opt.parse(args);
  if (opt.help_requested()) {
    std::fputs(opt.usage().c_str(), stdout);
    return 0;
  }
  const model::ModelConfig config = dit_config(opt.text("model"));
  std::vector<sp::Method> methods;
  for (const std::string& m : opt.text("sp") == "all"
                                  ? std::vector<std::string>{"ring", "ulysses", "usp", "auto"}
                                  : opt.list("sp"))
    methods.push_back(sp::parse_method(m, "--sp"));
  RankLaunch launch;
  launch.backend = opt.text("backend");
  TESSERA_CHECK_ARG(launch.backend == "auto" || launch.backend == "cuda" || launch.backend == "cpu",
                    "--backend = '", launch.backend, "': expected cuda, cpu or auto");
  launch.nranks = nranks_option(opt.text("nranks"));
  apply_emulation_options(int(opt.integer("emulate-nodes", 1, 4096)), "nic400", 0, -1,
                          launch.context);
  const bool flux = config.architecture == model::Architecture::kFlux;
  const bool on_cuda = launch.backend == "cuda" || (launch.backend == "auto" && cuda_available());
  if (on_cuda) {
    if (flux) return run_flux_cuda(opt, flux_inputs(opt, config.flux), methods, launch, argc, argv);
    return run_cogvideox_cuda(opt, cogvideox_inputs(opt, config.cogvideox), methods, launch, argc,
                              argv);
  }
  launch.backend = "cpu";
  if (launch.nranks == 0) launch.nranks = 4;
  int64_t seq = 0, out_cols = 0;
  std::string shape_text;
  StepFn step;
  if (flux) {
    const FluxInputs in = flux_inputs(opt, config.flux);
    seq = in.shape.image_tokens;
    out_cols = in.out_cols;
    shape_text = in.summary;
    step = flux_step(opt, in);
  } else {
    const CogVideoXInputs in = cogvideox_inputs(opt, config.cogvideox);
    seq = in.seq;
    out_cols = in.config.inner_dim();
    shape_text = in.summary;
    step = cogvideox_step(opt, in);
  }
  std::printf("# tessera run dit: %s, %s, %d cpu ranks\n# %-10s %12s %14s  plan\n",
              opt.text("model").c_str(), shape_text.c_str(), launch.nranks, "method", "step_ms",
              "max_diff");
  std::vector<float> first;  // the first method's output [L, out_cols], by token
  std::vector<BenchRecord> records;
  for (sp::Method method : methods) {
    std::vector<float> output(size_t(seq * out_cols), 0.0f);
    std::mutex mutex;
    double step_s = 0;
    std::string plan;
    const int code = run_on_ranks(launch, argc, argv, [&](RankContext& ctx) {
      sp::PlanOptions options;
      options.method = method;
      const std::function<RankStep()> run = step(ctx, options);
      const auto start = std::chrono::steady_clock::now();
      const RankStep r = run();
      const double s = max_across_ranks(ctx, seconds_since(start));
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t i = 0; i < r.tokens.size(); ++i)
        std::copy_n(r.rows.begin() + int64_t(i) * out_cols, out_cols,
                    output.begin() + r.tokens[i] * out_cols);
      if (ctx.rank == 0) {
        step_s = s;
        plan = r.plan;
      }
    });
    if (code != 0) return code;
    if (first.empty()) first = output;
    double max_diff = 0;
    for (size_t i = 0; i < output.size(); ++i)
      max_diff = std::max(max_diff, double(std::fabs(output[i] - first[i])));
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
  finish(opt, records, first, seq, out_cols);
  return 0;
}

const CommandRegistration kRunDit(
    "run dit", "one DiT step (Flux, CogVideoX blocks), sequence parallel, methods side by side",
    run_dit);

}  // namespace
}  // namespace tessera::cli
