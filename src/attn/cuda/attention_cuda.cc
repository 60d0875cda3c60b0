// cuda backend of tessera::attn: checks the kernels' limits, groups validated jobs into
// launches (at most kMaxJobsPerLaunch jobs and kMaxChunksPerLaunch chunks each; a job with
// more chunks is folded over several launches in stream order), looks up the launcher that
// kernels/attn/inst/*.cu registered for (dtype, head dim), and calls the row kernels for
// init_state / merge / finalize. Nothing here allocates device memory or synchronizes.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/attention_launch.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"
#include "tessera/runtime/cuda_check.h"

namespace tessera::attn {

namespace kernels {

namespace {
struct RegisteredKernel {
  ElementType element;
  int head_dim;
  AttentionLaunchFn fn;
  std::string variant;
};
std::vector<RegisteredKernel>& kernel_registry() {
  static std::vector<RegisteredKernel> r;
  return r;
}
}  // namespace

bool register_attention_kernel(ElementType element, int head_dim, AttentionLaunchFn fn,
                               const char* variant) {
  kernel_registry().push_back({element, head_dim, fn, variant});
  return true;
}

AttentionLaunchFn find_attention_kernel(ElementType element, int head_dim, const char* variant) {
  for (const RegisteredKernel& k : kernel_registry())
    if (k.element == element && k.head_dim == head_dim && k.variant == variant) return k.fn;
  return nullptr;
}

}  // namespace kernels

namespace detail {

namespace {

const Param<std::string> kAttnKernelVariant(
    "TESSERA_ATTN_KERNEL", "",
    "attention kernel variant to run (tuning builds register named ones; empty: production)");

using kernels::Bshd;
using kernels::ElementType;
using kernels::LaunchDesc;

// Makes `stream`'s device current for the scope of a launch.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    TESSERA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TESSERA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() {
    int now = 0;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
};

ElementType element_of(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return ElementType::kBF16;
    case DType::kFP8E4M3:
      return ElementType::kE4M3;
    default:
      return ElementType::kF16;
  }
}

kernels::FloatType float_type_of(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return kernels::FloatType::kBF16;
    case DType::kF16:
      return kernels::FloatType::kF16;
    default:
      return kernels::FloatType::kF32;
  }
}

// TMA ignores the stride of a size-1 dimension but still wants it to be a multiple of 16
// bytes: give such dimensions the head dim as stride.
int64_t tma_stride(const TensorView& t, int dim) {
  return t.size(dim) == 1 ? t.size(3) : t.stride(dim);
}

Bshd to_bshd(const TensorView& t) {
  return {t.data(), t.size(1), tma_stride(t, 0), tma_stride(t, 1), tma_stride(t, 2)};
}

kernels::RowTensor to_rows(const TensorView& t) {
  return {t.data(), float_type_of(t.dtype()), t.stride(0), t.stride(1), t.stride(2)};
}

kernels::LseTensor to_lse(const TensorView& t) {
  if (t.empty()) return {};
  return {t.data_as<const float>(), t.stride(0), t.stride(1), t.stride(2)};
}

// The launcher registered for (dtype, head dim): the TESSERA_ATTN_KERNEL variant where one is
// registered for it, production otherwise.
kernels::AttentionLaunchFn launcher_for(DType dtype, int64_t head_dim) {
  static const std::string variant = kAttnKernelVariant.get();  // read once: no hot-path allocation
  kernels::AttentionLaunchFn launch =
      kernels::find_attention_kernel(element_of(dtype), int(head_dim), variant.c_str());
  // A tuning variant registered for some (dtype, head dim) only: the rest run production.
  if (launch == nullptr && !variant.empty())
    launch = kernels::find_attention_kernel(element_of(dtype), int(head_dim), "");
  TESSERA_CHECK(launch != nullptr, ErrorCode::kUnsupported, "no cuda attention kernel for ",
                dtype_name(dtype), " head dim ", head_dim,
                " in this build (TESSERA_KERNEL_FILTER left it out?)");
  return launch;
}

// o [B, L, H, D] = 0 and lse (may be empty) = -inf: the rows that see no key (the merge kernel
// over zero partials).
void write_no_key(const TensorView& o, const TensorView& lse, const Stream& stream) {
  kernels::MergeDesc zero;
  zero.batch = o.size(0);
  zero.len = o.size(1);
  zero.heads = o.size(2);
  zero.head_dim = o.size(3);
  zero.out_o = to_rows(o);
  zero.out_lse = to_lse(lse);
  zero.cuda_stream = stream.cuda_stream();
  kernels::launch_merge_rows(zero);
}

// One forward job over one KV chunk (the varlen and FP8 launches): q, k, o [B', L, H, D], lse
// [B', H, L] or empty, `batch` the grid's z extent. The caller sets v, the mask and the varlen
// or FP8 fields.
LaunchDesc single_forward_launch(const TensorView& q, const TensorView& k, const TensorView& o,
                                 const TensorView& lse, int64_t batch, float softmax_scale,
                                 const Stream& stream) {
  LaunchDesc desc;
  desc.element = element_of(q.dtype());
  desc.head_dim = int(q.size(3));
  desc.batch = batch;
  desc.heads_q = q.size(2);
  desc.heads_kv = k.size(2);
  desc.softmax_scale = softmax_scale;
  desc.num_jobs = 1;
  desc.num_kv = 1;
  kernels::JobLaunch& job = desc.jobs[0];
  job.q = to_bshd(q);
  job.o = o.data();
  job.o_stride_b = o.stride(0);
  job.o_stride_l = o.stride(1);
  job.o_stride_h = o.stride(2);
  if (!lse.empty()) {
    job.lse = lse.data_as<float>();
    job.lse_stride_b = lse.stride(0);
    job.lse_stride_h = lse.stride(1);
    job.lse_stride_l = lse.stride(2);
  }
  job.kv_begin = 0;
  job.kv_end = 1;
  desc.kv[0].k = to_bshd(k);
  desc.cuda_stream = stream.cuda_stream();
  return desc;
}

}  // namespace

void cuda_check_supported(const TensorView& t, const char* what, bool is_qkv) {
  if (is_qkv) {
    TESSERA_CHECK(t.dtype() == DType::kBF16 || t.dtype() == DType::kF16, ErrorCode::kUnsupported,
                  what, " has dtype ", dtype_name(t.dtype()),
                  ": the cuda attention kernels take bf16 or f16");
    TESSERA_CHECK(t.size(3) == 64 || t.size(3) == 128 || t.size(3) == 256,
                  ErrorCode::kUnsupported, what, " = ", t.to_string(), " has head dim ", t.size(3),
                  ": the cuda attention kernels take 64, 128 or 256");
  }
  const auto address = reinterpret_cast<uintptr_t>(t.data());
  TESSERA_CHECK(address % 16 == 0, ErrorCode::kUnsupported, what, " = ", t.to_string(),
                " starts at ", t.data(), ": the cuda attention kernels need 16-byte aligned data");
  for (int d = 0; d < 3; ++d) {
    if (t.size(d) <= 1) continue;  // a stride that is never stepped does not matter
    TESSERA_CHECK(
        t.stride(d) > 0 && (t.stride(d) * int64_t(t.element_size())) % 16 == 0,
        ErrorCode::kUnsupported, what, " = ", t.to_string(), " has stride ", t.stride(d),
        " in dim ", d,
        ": the cuda attention kernels need strides that are positive multiples of 16 bytes");
  }
}

void cuda_attention(std::span<const AttentionJob> jobs, bool accumulate, float softmax_scale,
                    const Stream& stream) {
  if (jobs.empty()) return;
  const TensorView& q0 = jobs[0].q;
  const int64_t batch = q0.size(0), heads_q = q0.size(2), head_dim = q0.size(3);
  if (batch == 0 || heads_q == 0) return;
  DeviceScope device_scope(stream.device().index);
  const ElementType element = element_of(q0.dtype());
  const kernels::AttentionLaunchFn launch = launcher_for(q0.dtype(), head_dim);

  // Every job's non-empty chunks, cut into pieces of at most kMaxChunksPerLaunch.
  struct Piece {
    size_t job;
    std::vector<const KvChunk*> chunks;
    bool fresh = false;  // the job's first piece of a fresh accumulate
    bool last = false;   // the job's last piece (writes its final_o, if any)
  };
  std::vector<std::vector<Piece>> rounds;  // round r: piece r of every job that has one
  int64_t heads_kv = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const AttentionJob& job = jobs[j];
    if (job.q.size(1) == 0) continue;
    std::vector<const KvChunk*> chunks;
    for (const KvChunk& c : job.kv)
      if (c.k.size(1) > 0) chunks.push_back(&c);
    if (chunks.empty()) {
      // Nothing to fold. accumulate: a fresh state is written empty; a final output is the
      // state finalized (zeros for a fresh one).
      const bool final_out = accumulate && !job.final_o.empty();
      if (accumulate && !job.fresh && final_out) {
        const Partial state{job.o, job.lse};
        cuda_merge(std::span<const Partial>(&state, 1), job.final_o, TensorView(), stream);
      } else if (accumulate && job.fresh && !final_out) {
        cuda_init_state(AttnState{job.o, job.lse}, stream);
      } else if (!accumulate || job.fresh) {
        // No key at all: o = 0 (forward's o, or final_o of a fresh job), lse = -inf.
        write_no_key(final_out ? job.final_o : job.o, job.lse, stream);
      }
      continue;
    }
    heads_kv = chunks[0]->k.size(2);
    const size_t pieces = (chunks.size() + kMaxChunksPerLaunch - 1) / kMaxChunksPerLaunch;
    TESSERA_CHECK(accumulate || pieces == 1, ErrorCode::kUnsupported, "attn::forward with ",
                  chunks.size(), " non-empty KV chunks: one launch takes at most ",
                  kMaxChunksPerLaunch, "; use init_state + accumulate + finalize");
    for (size_t k = 0; k < pieces; ++k) {
      if (rounds.size() <= k) rounds.resize(k + 1);
      Piece piece{j, {}, accumulate && job.fresh && k == 0, k + 1 == pieces};
      for (size_t c = k * kMaxChunksPerLaunch;
           c < std::min(chunks.size(), (k + 1) * kMaxChunksPerLaunch); ++c)
        piece.chunks.push_back(chunks[c]);
      rounds[k].push_back(std::move(piece));
    }
  }

  LaunchDesc desc;
  auto reset = [&] {
    desc.element = element;
    desc.head_dim = int(head_dim);
    desc.batch = batch;
    desc.heads_q = heads_q;
    desc.heads_kv = heads_kv;
    desc.softmax_scale = softmax_scale;
    desc.accumulate = accumulate;
    desc.num_jobs = 0;
    desc.num_kv = 0;
    desc.cuda_stream = stream.cuda_stream();
  };
  auto flush = [&] {
    if (desc.num_jobs > 0) launch(desc);
    reset();
  };
  reset();
  for (const std::vector<Piece>& round : rounds) {
    for (const Piece& piece : round) {
      if (desc.num_jobs == kMaxJobsPerLaunch ||
          desc.num_kv + int(piece.chunks.size()) > kMaxChunksPerLaunch) {
        flush();
      }
      const AttentionJob& job = jobs[piece.job];
      kernels::JobLaunch& out = desc.jobs[desc.num_jobs++];
      out.q = to_bshd(job.q);
      out.o = job.o.data();
      out.o_stride_b = job.o.stride(0);
      out.o_stride_l = job.o.stride(1);
      out.o_stride_h = job.o.stride(2);
      out.lse = job.lse.empty() ? nullptr : job.lse.data_as<float>();
      if (!job.lse.empty()) {
        out.lse_stride_b = job.lse.stride(0);
        out.lse_stride_h = job.lse.stride(1);
        out.lse_stride_l = job.lse.stride(2);
      }
      out.fresh = piece.fresh;
      out.final_o = nullptr;
      if (accumulate && piece.last && !job.final_o.empty()) {
        out.final_o = job.final_o.data();
        out.final_o_stride_b = job.final_o.stride(0);
        out.final_o_stride_l = job.final_o.stride(1);
        out.final_o_stride_h = job.final_o.stride(2);
      }
      out.kv_begin = desc.num_kv;
      for (const KvChunk* c : piece.chunks) {
        kernels::KvLaunchChunk& kv = desc.kv[desc.num_kv++];
        kv.k = to_bshd(c->k);
        kv.v = to_bshd(c->v);
        kv.mask = c->mask;
      }
      out.kv_end = desc.num_kv;
    }
    flush();  // the next round folds after this one
  }
}

void cuda_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                           int64_t max_seqlen_q, bool causal, float softmax_scale,
                           const TensorView& o, const TensorView& lse, const Stream& stream) {
  const int64_t batch = cu_seqlens_q.size(0) - 1, head_dim = q.size(3);
  if (batch == 0 || q.size(1) == 0 || max_seqlen_q == 0) return;
  DeviceScope device_scope(stream.device().index);
  if (k.size(1) == 0) {  // no key in any sequence: o = 0, lse = -inf
    write_no_key(o, lse, stream);
    return;
  }
  const kernels::AttentionLaunchFn launch = launcher_for(q.dtype(), head_dim);
  LaunchDesc desc = single_forward_launch(q, k, o, lse, batch, softmax_scale, stream);
  desc.cu_seqlens_q = cu_seqlens_q.data_as<const int32_t>();
  desc.cu_seqlens_k = cu_seqlens_k.data_as<const int32_t>();
  desc.max_seqlen_q = max_seqlen_q;
  desc.kv[0].v = to_bshd(v);
  desc.kv[0].mask = causal ? MaskSpec::causal_at(0, 0) : MaskSpec::none();  // aligned per sequence
  launch(desc);
}

void cuda_attention_fp8(const TensorView& q, const TensorView& k, const TensorView& v,
                        const Fp8DescaleTensors& descales, const MaskSpec& mask,
                        float softmax_scale, const TensorView& o, const TensorView& lse,
                        const TensorView& workspace, const Stream& stream) {
  const int64_t batch = q.size(0), heads_q = q.size(2), heads_kv = k.size(2), head_dim = q.size(3);
  if (batch == 0 || heads_q == 0 || q.size(1) == 0) return;
  DeviceScope device_scope(stream.device().index);
  if (k.size(1) == 0) {
    write_no_key(o, lse, stream);
    return;
  }
  const kernels::AttentionLaunchFn launch = launcher_for(q.dtype(), head_dim);
  kernels::launch_fp8_transpose_v(to_bshd(v), batch, heads_kv, int(head_dim), workspace.data(),
                                  stream.cuda_stream());
  LaunchDesc desc = single_forward_launch(q, k, o, lse, batch, softmax_scale, stream);
  desc.descale_q = descales.q.data_as<const float>();
  desc.descale_k = descales.k.data_as<const float>();
  desc.descale_v = descales.v.data_as<const float>();
  const int64_t vt_len = kernels::fp8_vt_len(k.size(1));
  desc.kv[0].v = {workspace.data(), vt_len, heads_kv * head_dim * vt_len, vt_len,
                  head_dim * vt_len};
  desc.kv[0].mask = mask;
  launch(desc);
}

void cuda_init_state(const AttnState& state, const Stream& stream) {
  DeviceScope device_scope(stream.device().index);
  const TensorView& o = state.o;
  kernels::launch_init_state(to_rows(o), to_lse(state.lse), o.size(0), o.size(1), o.size(2),
                             o.size(3), stream.cuda_stream());
}

void cuda_merge(std::span<const Partial> partials, const TensorView& o, const TensorView& lse,
                const Stream& stream) {
  TESSERA_CHECK_ARG(partials.size() <= size_t(kernels::kMaxMergePartials),
                    "merge: ", partials.size(), " partials: expected at most ",
                    kernels::kMaxMergePartials, " per call");
  DeviceScope device_scope(stream.device().index);
  kernels::MergeDesc desc;
  desc.batch = o.size(0);
  desc.len = o.size(1);
  desc.heads = o.size(2);
  desc.head_dim = o.size(3);
  desc.num_partials = int(partials.size());
  for (size_t k = 0; k < partials.size(); ++k) {
    desc.partial_o[k] = to_rows(partials[k].o);
    desc.partial_lse[k] = to_lse(partials[k].lse);
  }
  desc.out_o = to_rows(o);
  desc.out_lse = to_lse(lse);
  desc.cuda_stream = stream.cuda_stream();
  kernels::launch_merge_rows(desc);
}

}  // namespace detail
}  // namespace tessera::attn
