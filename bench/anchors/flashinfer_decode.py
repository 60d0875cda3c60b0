#!/usr/bin/env python3
"""FlashInfer peer for `tessera bench decode`: one Llama decoder layer's attention block at
decode, run as SGLang runs it, captured in one CUDA graph and replayed.

Per step (all bf16, batch B, every sequence adds one token):
  xn  = flashinfer.norm.rmsnorm(x, w_norm, eps)                    input RMSNorm
  qkv = xn @ Wqkv^T, Wqkv = cat(Wq, Wk, Wv)                         one torch GEMM
  RoPE on the q and k parts of qkv, in place, non-interleaved (rotate-half):
        --rope cos_sin_cache (default, SGLang's path): apply_rope_with_cos_sin_cache_inplace
          with a float32 cos/sin cache built as SGLang builds it (llama3 scaling included);
        --rope pos_ids: apply_rope_pos_ids_inplace, or apply_llama31_rope_pos_ids_inplace for
          the llama3 scaling.
  flashinfer.page.append_paged_kv_cache(k, v, ...)                  NHD, page size 16
  o   = BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True).run(q, (K, V))
        planned once, outside the graph, on fixed indptr/indices/last_page_len buffers;
        CUDA-core decode unless --tensor-cores (auto = SGLang's rule: GQA group > 4)
  out = o @ Wo^T                                                    one torch GEMM
The whole step is captured in one CUDA graph (torch.cuda.graph); timing is CUDA events
around each replay, --warmup untimed replays then the median of --iters (as
tools/tessera/bench_decode.cc times its graphs).

Semantics as `tessera bench decode`: case "<model> b<B> ctx<C>": every sequence holds C-1
cached tokens and appends one at position C-1, so attention runs over C tokens. Pages of
sequence b are [b*P, (b+1)*P), P = ceil(C/16). Inputs are uniform random: x and the norm
weight in [-1, 1), weights in +-1/sqrt(hidden), K and V in [-1, 1).
Bytes = weights (2*q + 2*kv)*hidden*2 + B*(C-1)*kv*2*2 (K and V read), q = Hq*D,
kv = Hkv*D. The HBM read bandwidth is measured in the same run by streaming reads of a
--read-gib GiB buffer (torch.amax and torch.sum, no copy; the fastest method's median of
--read-iters); roofline_fraction = (bytes / read_gbps) / median. --read-gbps uses a given
bandwidth instead (e.g. the one `tessera bench decode` printed).

Correctness, once per case, on the replayed graph's result: sequences 0 and B-1 against a
float32 torch computation of the same block (rmsnorm, projection, RoPE in float64 angles,
softmax attention over the cached tokens plus the new one, o_proj); max |out - ref| must be
within --tol of max |ref|, and the appended K/V slot within --tol of the reference k/v.
A second replay must give bitwise the same output (printed, recorded as `deterministic`).

Prints one line per case:  RESULT <case> flashinfer <median_us> us <GB/s> GB/s roofline <f> ok <0|1>
and a table at the end; --json FILE writes the records in the format of
tools/tessera/bench_record.cc (bench "decode", impl "flashinfer", extras roofline_fraction,
bytes, read_gbps, ...). --dry-run needs neither torch nor a GPU: it lists the cases and their
bytes and writes placeholder records (median_us 0, ok false).

FlashInfer compiles its kernels with nvcc on first use (JIT, into ~/.cache/flashinfer or
$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer); the needed modules are built up front, in
parallel (--jit-only stops after that). On the GPU machine, with the wheels in .whl/:
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  python3 bench/anchors/flashinfer_decode.py --json $OUT/flashinfer_decode.json
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
import traceback

PAGE_SIZE = 16

# Same shapes as src/decode/model_config.cc.
MODELS = {
    "llama2-7b": {"hidden": 4096, "heads": 32, "kv_heads": 32, "head_dim": 128,
                  "theta": 10000.0, "eps": 1e-5, "llama3": None},
    "llama3-8b": {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
                  "theta": 500000.0, "eps": 1e-5,
                  "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position": 8192}},
}


def case_name(model, batch, context):
    return f"{model} b{batch} ctx{context}"


def block_bytes(m, batch, context):
    """Weights once (Wq, Wk, Wv, Wo) plus the K and V already cached, all bf16."""
    q = m["heads"] * m["head_dim"]
    kv = m["kv_heads"] * m["head_dim"]
    return (2 * q + 2 * kv) * m["hidden"] * 2 + batch * (context - 1) * kv * 2 * 2


def use_tensor_cores(mode, m):
    if mode == "on":
        return True
    if mode == "off":
        return False
    return m["heads"] // m["kv_heads"] > 4  # SGLang's should_use_tensor_core for bf16 KV


def current_commit():
    c = os.environ.get("TESSERA_COMMIT")
    if c:
        return c
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "unknown"


def current_date():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def make_record(name, gpu, median_us, nbytes, ok, extra, extra_text, commit, date):
    """One record with bench_record.cc's fields, in its order: the fixed fields, gbps, ok,
    numeric extras (sorted), text extras (sorted), commit, date."""
    rec = {"bench": "decode", "case": name, "impl": "flashinfer", "gpu": gpu, "num_gpus": 1,
           "topology": "1x1", "median_us": median_us,
           "gbps": nbytes / median_us * 1e-3 if median_us > 0 else 0.0, "ok": bool(ok)}
    for k in sorted(extra):
        v = extra[k]
        rec[k] = v if v is None or math.isfinite(v) else None
    for k in sorted(extra_text):
        rec[k] = extra_text[k]
    rec["commit"] = commit
    rec["date"] = date
    return rec


def clip(text, head=400, tail=6000):
    """Head and tail of a long message (a failed nvcc build puts the errors at the end)."""
    if len(text) <= head + tail + 40:
        return text
    return f"{text[:head]}\n  [... {len(text) - head - tail} characters ...]\n{text[-tail:]}"


def write_json(path, records):
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")


def parse_list(text, what, conv=str):
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise SystemExit(f"flashinfer_decode.py: --{what} is empty")
    try:
        return [conv(t) for t in items]
    except ValueError:
        raise SystemExit(f"flashinfer_decode.py: --{what}: cannot parse '{text}'")


def add_case_args(ap):
    """The options every FlashInfer peer takes: cases, timing, bandwidth, check, output."""
    ap.add_argument("--batches", default="1,16", help="batch sizes")
    ap.add_argument("--contexts", default="1024,4096,16384,32768", help="tokens attended (C-1 cached + 1 new)")
    ap.add_argument("--iters", type=int, default=100, help="timed graph replays per case")
    ap.add_argument("--warmup", type=int, default=10, help="untimed graph replays before timing")
    ap.add_argument("--read-gib", type=float, default=4.0, help="buffer of the streaming-read measurement")
    ap.add_argument("--read-iters", type=int, default=20, help="timed reads per method (median)")
    ap.add_argument("--read-gbps", type=float, default=0.0,
                    help="use this HBM read bandwidth (GB/s) instead of measuring it")
    ap.add_argument("--tol", type=float, default=2e-2, help="max error relative to max |reference|")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="write the records to this file")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: list cases and bytes, write placeholder records")


def check_case_args(args, script):
    """add_case_args' options checked; sets args.batch_list and args.context_list."""
    args.batch_list = parse_list(args.batches, "batches", int)
    args.context_list = parse_list(args.contexts, "contexts", int)
    if any(b < 1 for b in args.batch_list) or any(c < 1 for c in args.context_list):
        raise SystemExit(f"{script}: --batches and --contexts must be >= 1")
    if args.iters < 1 or args.warmup < 0 or args.read_iters < 1:
        raise SystemExit(f"{script}: --iters and --read-iters must be >= 1, --warmup >= 0")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="llama2-7b,llama3-8b", help="comma list of " + ", ".join(MODELS))
    add_case_args(ap)
    ap.add_argument("--rope", choices=["cos_sin_cache", "pos_ids"], default="cos_sin_cache",
                    help="FlashInfer RoPE entry point (cos_sin_cache is what SGLang calls)")
    ap.add_argument("--tensor-cores", choices=["auto", "on", "off"], default="auto",
                    help="decode wrapper's use_tensor_cores; auto = SGLang's rule (GQA group > 4)")
    ap.add_argument("--workspace-mib", type=int, default=256, help="decode float workspace buffer")
    ap.add_argument("--jit-only", action="store_true", help="build FlashInfer's JIT modules and stop")
    args = ap.parse_args(argv)
    check_case_args(args, "flashinfer_decode.py")
    args.model_list = parse_list(args.models, "models")
    for name in args.model_list:
        if name not in MODELS:
            raise SystemExit(f"flashinfer_decode.py: --models: unknown model '{name}' "
                             f"(known: {', '.join(MODELS)})")
    return args


def cases(args):
    for model in args.model_list:
        for batch in args.batch_list:
            for context in args.context_list:
                yield model, batch, context


# ----------------------------------------------------------------------------------------
# RoPE frequencies (Hugging Face / SGLang llama3 scaling)


def rope_inv_freq(torch, m, dtype):
    """theta^(-2i/D) for i < D/2, with llama3 scaling where the model has it, in `dtype`."""
    D = m["head_dim"]
    inv = 1.0 / (m["theta"] ** (torch.arange(0, D, 2, dtype=dtype) / D))
    s = m["llama3"]
    if s is None:
        return inv
    low_wavelen = s["original_max_position"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position"] / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s["factor"], inv)
    smooth = (s["original_max_position"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def cos_sin_cache(torch, m, max_pos, device):
    """[max_pos, D] float32: cos in the first half, sin in the second (SGLang's layout and
    arithmetic: float32 inv_freq and float32 position * inv_freq)."""
    inv = rope_inv_freq(torch, m, torch.float32)
    t = torch.arange(max_pos, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous().to(device)


def rotate_half_ref(torch, x, pos, inv64):
    """x [H, D] float32 rotated by pos * inv_freq (angles in float64)."""
    ang = pos * inv64
    cos = ang.cos().to(torch.float32).to(x.device)
    sin = ang.sin().to(torch.float32).to(x.device)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


# ----------------------------------------------------------------------------------------
# One case: buffers, the step, the reference


class DecodeBlock:
    def __init__(self, torch, fi, m, batch, context, args, device):
        self.torch, self.fi, self.m = torch, fi, m
        self.batch, self.context, self.args = batch, context, args
        dt = torch.bfloat16
        self.Hq, self.Hkv, self.D, self.hidden = m["heads"], m["kv_heads"], m["head_dim"], m["hidden"]
        self.q, self.kv = self.Hq * self.D, self.Hkv * self.D
        B, q, kv, hidden = batch, self.q, self.kv, self.hidden

        def uniform(shape, lo, hi, dtype=dt):
            return torch.empty(shape, dtype=dtype, device=device).uniform_(lo, hi)

        ws = 1.0 / math.sqrt(hidden)
        self.wqkv = uniform((q + 2 * kv, hidden), -ws, ws)  # cat(Wq, Wk, Wv), rows = outputs
        self.wo = uniform((hidden, q), -ws, ws)
        self.w_norm = uniform((hidden,), -1.0, 1.0)
        self.x = uniform((B, hidden), -1.0, 1.0)

        self.pages_per_seq = (context + PAGE_SIZE - 1) // PAGE_SIZE
        num_pages = B * self.pages_per_seq
        self.k_cache = uniform((num_pages, PAGE_SIZE, self.Hkv, self.D), -1.0, 1.0)  # NHD
        self.v_cache = uniform((num_pages, PAGE_SIZE, self.Hkv, self.D), -1.0, 1.0)
        i32 = torch.int32
        self.kv_indptr = torch.arange(B + 1, dtype=i32, device=device) * self.pages_per_seq
        self.kv_indices = torch.arange(num_pages, dtype=i32, device=device)
        last = context - (self.pages_per_seq - 1) * PAGE_SIZE
        self.kv_last_page_len = torch.full((B,), last, dtype=i32, device=device)
        self.batch_indices = torch.arange(B, dtype=i32, device=device)
        self.positions = torch.full((B,), context - 1, dtype=i32, device=device)

        # Static activations; the q/k/v views share qkv's storage (row stride q + 2 kv).
        self.xn = torch.empty((B, hidden), dtype=dt, device=device)
        self.qkv = torch.empty((B, q + 2 * kv), dtype=dt, device=device)
        self.q2, self.k2 = self.qkv[:, :q], self.qkv[:, q:q + kv]
        self.q3 = self.q2.view(B, self.Hq, self.D)
        self.k3 = self.k2.view(B, self.Hkv, self.D)
        self.v3 = self.qkv[:, q + kv:].view(B, self.Hkv, self.D)
        self.attn = torch.empty((B, self.Hq, self.D), dtype=dt, device=device)
        self.out = torch.empty((B, hidden), dtype=dt, device=device)
        self.cos_sin = cos_sin_cache(torch, m, context, device) if args.rope == "cos_sin_cache" else None

        self.tensor_cores = use_tensor_cores(args.tensor_cores, m)
        self.workspace = torch.zeros(args.workspace_mib << 20, dtype=torch.uint8, device=device)
        self.indptr_buf = torch.empty(B + 1, dtype=i32, device=device)
        self.indices_buf = torch.empty(num_pages, dtype=i32, device=device)
        self.last_buf = torch.empty(B, dtype=i32, device=device)
        self.wrapper = fi.decode.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self.tensor_cores,
            paged_kv_indptr_buffer=self.indptr_buf, paged_kv_indices_buffer=self.indices_buf,
            paged_kv_last_page_len_buffer=self.last_buf)
        # q_data_type defaults to float16 in plan(); name both types.
        self.wrapper.plan(self.kv_indptr, self.kv_indices, self.kv_last_page_len, self.Hq, self.Hkv,
                          self.D, PAGE_SIZE, pos_encoding_mode="NONE", q_data_type=dt, kv_data_type=dt)

    def check_indices_positions(self):
        """flashinfer.page.get_batch_indices_positions must give the batch indices and
        positions used here (one appended token per sequence at C-1). Returns a note."""
        torch, fi = self.torch, self.fi
        try:
            append_indptr = torch.arange(self.batch + 1, dtype=torch.int32, device=self.x.device)
            seq_lens = torch.full((self.batch,), self.context, dtype=torch.int32, device=self.x.device)
            bi, pos = fi.page.get_batch_indices_positions(append_indptr, seq_lens, self.batch)
            same = torch.equal(bi.int(), self.batch_indices) and torch.equal(pos.int(), self.positions)
            return "" if same else "get_batch_indices_positions disagrees"
        except Exception as e:  # a Triton kernel; informative only
            return f"get_batch_indices_positions failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"

    def step(self):
        torch, fi, m = self.torch, self.fi, self.m
        fi.norm.rmsnorm(self.x, self.w_norm, m["eps"], out=self.xn)
        torch.mm(self.xn, self.wqkv.t(), out=self.qkv)
        if self.args.rope == "cos_sin_cache":
            fi.rope.apply_rope_with_cos_sin_cache_inplace(
                self.positions, self.q2, self.k2, self.D, self.cos_sin, is_neox=True)
        elif m["llama3"] is not None:
            s = m["llama3"]
            fi.rope.apply_llama31_rope_pos_ids_inplace(
                self.q3, self.k3, self.positions, interleave=False, rope_scale=s["factor"],
                rope_theta=m["theta"], low_freq_factor=s["low_freq_factor"],
                high_freq_factor=s["high_freq_factor"], old_context_len=s["original_max_position"])
        else:
            fi.rope.apply_rope_pos_ids_inplace(
                self.q3, self.k3, self.positions, interleave=False, rope_scale=1.0, rope_theta=m["theta"])
        fi.page.append_paged_kv_cache(
            self.k3, self.v3, self.batch_indices, self.positions, (self.k_cache, self.v_cache),
            self.kv_indices, self.kv_indptr, self.kv_last_page_len, "NHD")
        self.wrapper.run(self.q3, (self.k_cache, self.v_cache), out=self.attn)
        torch.mm(self.attn.view(self.batch, self.q), self.wo.t(), out=self.out)

    def reference(self, b):
        """float32 block for sequence b, reading the cache as it is now (C-1 old tokens).
        Returns (out [hidden], k [Hkv, D], v [Hkv, D])."""
        torch, m = self.torch, self.m
        D, Hq, Hkv, q, kv = self.D, self.Hq, self.Hkv, self.q, self.kv
        x = self.x[b].float()
        xn = x * torch.rsqrt(x.pow(2).mean() + m["eps"]) * self.w_norm.float()
        qkv = self.wqkv.float() @ xn
        pos = self.context - 1
        inv64 = rope_inv_freq(torch, m, torch.float64)
        qh = rotate_half_ref(torch, qkv[:q].view(Hq, D), pos, inv64)
        kh = rotate_half_ref(torch, qkv[q:q + kv].view(Hkv, D), pos, inv64)
        vh = qkv[q + kv:].view(Hkv, D)
        first = b * self.pages_per_seq
        pages = self.kv_indices[first:first + self.pages_per_seq].long()
        k_old = self.k_cache[pages].reshape(-1, Hkv, D)[:pos].float()
        v_old = self.v_cache[pages].reshape(-1, Hkv, D)[:pos].float()
        k_all = torch.cat((k_old, kh[None]), 0).transpose(0, 1)  # [Hkv, C, D]
        v_all = torch.cat((v_old, vh[None]), 0).transpose(0, 1)
        group = Hq // Hkv
        qg = qh.view(Hkv, group, D)
        scores = torch.matmul(qg, k_all.transpose(1, 2)) / math.sqrt(D)  # [Hkv, group, C]
        o = torch.matmul(torch.softmax(scores, dim=-1), v_all).reshape(q)
        out = self.wo.float() @ o
        return out, kh, vh

    def appended_slot(self, b):
        pos = self.context - 1
        page = int(self.kv_indices[b * self.pages_per_seq + pos // PAGE_SIZE])
        return self.k_cache[page, pos % PAGE_SIZE].float(), self.v_cache[page, pos % PAGE_SIZE].float()

    def check(self):
        """Compares the current outputs (after a replay) for sequences 0 and B-1. Returns
        (ok, max_err, rel_err, kv_err_rel)."""
        tol = self.args.tol
        ok, worst_abs, worst_rel, worst_kv = True, 0.0, 0.0, 0.0
        for b in sorted({0, self.batch - 1}):
            ref, kh, vh = self.reference(b)
            err = float((self.out[b].float() - ref).abs().max())
            scale = float(ref.abs().max())
            rel = err / scale if scale > 0 else float("inf")
            ks, vs = self.appended_slot(b)
            kerr = float((ks - kh).abs().max()) / max(float(kh.abs().max()), 1e-30)
            verr = float((vs - vh).abs().max()) / max(float(vh.abs().max()), 1e-30)
            ok = ok and rel <= tol and kerr <= tol and verr <= tol
            worst_abs, worst_rel = max(worst_abs, err), max(worst_rel, rel)
            worst_kv = max(worst_kv, kerr, verr)
        return ok, worst_abs, worst_rel, worst_kv


# ----------------------------------------------------------------------------------------
# GPU parts


def median_us(torch, fn, warmup, iters):
    """Median of `iters` event-timed calls after `warmup` untimed ones (bench_decode.cc's)."""
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(iters):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3)
    samples.sort()
    return samples[iters // 2]


def measure_read_gbps(torch, gib, iters):
    """Streaming read of a `gib` GiB bf16 buffer with reductions that copy nothing; the best
    method's median. Returns (GB/s, method, {method: GB/s})."""
    nbytes = int(gib * (1 << 30)) // 16 * 16
    buf = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").uniform_(-1.0, 1.0)
    methods = {
        "amax bf16": lambda: torch.amax(buf),
        "amax int32 view": lambda: torch.amax(buf.view(torch.int32)),
        "sum float32 view": lambda: torch.sum(buf.view(torch.float32)),
    }
    results = {}
    for name, fn in methods.items():
        try:
            us = median_us(torch, fn, 3, iters)
            results[name] = nbytes / us * 1e-3
        except RuntimeError as e:
            print(f"# streaming read '{name}' failed: {str(e).splitlines()[0]}", flush=True)
    del buf
    torch.cuda.empty_cache()
    if not results:
        raise RuntimeError("no streaming-read method ran")
    best = max(results, key=results.get)
    return results[best], best, results


def prebuild_jit(torch, fi, args):
    """Builds (or loads) FlashInfer's JIT modules for the cases, in parallel threads, so the
    nvcc builds overlap. A failure here is printed; the first call in a case builds again."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = {"norm": fi.norm.get_norm_module, "rope": fi.rope.get_rope_module,
            "page": fi.page.get_page_module}
    dt = torch.bfloat16
    for name in args.model_list:
        m = MODELS[name]
        D = m["head_dim"]
        if use_tensor_cores(args.tensor_cores, m):
            # What plan() asks for on the tensor-core path (the FA2 prefill template).
            key = f"batch prefill fa2 bf16 d{D}"
            jobs[key] = (lambda D=D: fi.prefill.get_batch_prefill_module(
                "fa2", dt, dt, dt, torch.int32, D, D, 0, False, False, False))
        else:
            # plan()'s arguments: q, kv, o dtypes, index dtype, head_dim qk/vo, pos encoding
            # NONE (0), sliding window, logits soft cap.
            key = f"batch decode bf16 d{D}"
            jobs[key] = (lambda D=D: fi.decode.get_batch_decode_module(
                dt, dt, dt, torch.int32, D, D, 0, False, False))
    t0 = time.time()

    def build(item):
        name, fn = item
        t = time.time()
        try:
            fn()
            return name, time.time() - t, ""
        except Exception as e:
            return name, time.time() - t, f"{type(e).__name__}: {e}"

    failed = 0
    with ThreadPoolExecutor(max_workers=len(jobs)) as ex:
        for name, secs, err in ex.map(build, jobs.items()):
            if err:
                failed += 1
                print(f"# jit {name}: FAILED after {secs:.0f} s: {clip(err)}", flush=True)
            else:
                print(f"# jit {name}: ready in {secs:.1f} s", flush=True)
    print(f"# jit: {len(jobs) - failed}/{len(jobs)} modules in {time.time() - t0:.0f} s", flush=True)
    return failed


def capture_check_time(torch, block, args):
    """The peer's step of `block` (step(), check(), out) warmed up eagerly, captured in a CUDA
    graph, checked on a replay, replayed again for the bitwise check, then timed. Returns
    (median_us, (ok, max_err, rel_err, kv_err), deterministic)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # eager warm-up: JIT loads and lazily made buffers, outside capture
            block.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        block.step()
    graph.replay()
    torch.cuda.synchronize()
    checked = block.check()
    first = block.out.clone()
    graph.replay()
    torch.cuda.synchronize()
    deterministic = torch.equal(first, block.out)
    us = median_us(torch, graph.replay, args.warmup, args.iters)
    del graph, first
    return us, checked, deterministic


def run_case(torch, fi, name, m, batch, context, args, read_gbps):
    """Builds, checks and times one case; returns a result dict."""
    torch.manual_seed(args.seed)  # a case's inputs do not depend on which cases ran before
    block = DecodeBlock(torch, fi, m, batch, context, args, "cuda")
    note = block.check_indices_positions()
    us, (ok, err, rel, kv_err), deterministic = capture_check_time(torch, block, args)
    nbytes = block_bytes(m, batch, context)
    roof_us = nbytes / read_gbps * 1e-3
    res = {"us": us, "bytes": nbytes, "roof_us": roof_us, "ok": ok, "max_err": err, "rel_err": rel,
           "kv_err": kv_err, "deterministic": deterministic, "tensor_cores": block.tensor_cores,
           "note": note}
    del block
    return res


def dry_run(args):
    gbps = args.read_gbps if args.read_gbps > 0 else 4300.0
    commit, date = current_commit(), current_date()
    print(f"# dry run: nothing measured; roofline times at {gbps:.0f} GB/s", flush=True)
    print(f"# {'case':<28} {'MB':>10} {'roof_us':>10} {'tensor_cores':>12}")
    records = []
    for model, batch, context in cases(args):
        m = MODELS[model]
        name = case_name(model, batch, context)
        nbytes = block_bytes(m, batch, context)
        roof_us = nbytes / gbps * 1e-3
        tc = use_tensor_cores(args.tensor_cores, m)
        print(f"  {name:<28} {nbytes / 1e6:>10.1f} {roof_us:>10.1f} {int(tc):>12}")
        records.append(make_record(
            name, "none", 0.0, nbytes, False,
            {"bytes": float(nbytes), "read_gbps": gbps, "roofline_fraction": 0.0,
             "tensor_cores": float(tc)},
            {"kv_layout": f"paged{PAGE_SIZE}", "rope": args.rope, "note": "dry run: nothing measured"},
            commit, date))
    if args.json:
        write_json(args.json, records)
        print(f"# wrote {len(records)} records to {args.json}", flush=True)
    return 0


def start_gpu(script, submodules):
    """Imports torch and FlashInfer with its `submodules`, insists on a GPU and makes float32
    matmuls real float32 (the references). Returns (torch, flashinfer, GPU name, import s)."""
    # torch >= 2.10 exports the DLPack exchange API itself; keep tvm-ffi from JIT-building its
    # own torch addon (it would only matter for an older torch, and then the fallback works).
    os.environ.setdefault("TVM_FFI_DISABLE_TORCH_C_DLPACK", "1")
    t0 = time.time()
    import importlib
    import torch
    import flashinfer as fi
    for name in submodules:
        importlib.import_module(f"flashinfer.{name}")  # used as attributes of fi
    if not torch.cuda.is_available():
        raise SystemExit(f"{script}: no CUDA device (use --dry-run to test without one)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch, fi, torch.cuda.get_device_name(0), time.time() - t0


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)

    torch, fi, gpu, import_s = start_gpu("flashinfer_decode.py", ["decode", "norm", "page", "prefill", "rope"])
    try:
        import tvm_ffi
        tvm_ver = tvm_ffi.__version__
    except Exception:
        tvm_ver = "?"
    print(f"# flashinfer {fi.__version__}, tvm-ffi {tvm_ver}, torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), {gpu}; imports {import_s:.1f} s", flush=True)
    print(f"# rope {args.rope}, tensor cores {args.tensor_cores}, page size {PAGE_SIZE} NHD, "
          f"{args.iters} timed replays after {args.warmup}", flush=True)

    failed = prebuild_jit(torch, fi, args)
    if args.jit_only:
        return 1 if failed else 0

    if args.read_gbps > 0:
        read_gbps, read_method = args.read_gbps, "given"
        print(f"# streaming read: {read_gbps:.0f} GB/s (given) on {gpu}", flush=True)
    else:
        read_gbps, read_method, per = measure_read_gbps(torch, args.read_gib, args.read_iters)
        detail = ", ".join(f"{k} {v:.0f}" for k, v in per.items())
        print(f"# streaming read: {read_gbps:.0f} GB/s on {gpu} ({read_method}; {detail})", flush=True)

    commit, date = current_commit(), current_date()
    records, rows = [], []
    for model, batch, context in cases(args):
        m = MODELS[model]
        name = case_name(model, batch, context)
        try:
            r = run_case(torch, fi, name, m, batch, context, args, read_gbps)
        except Exception as e:  # OOM or any other failure: report, free, go on
            oom = isinstance(e, torch.cuda.OutOfMemoryError)
            first_line = str(e).splitlines()[0] if str(e) else ""
            if oom:
                print(f"  {name}: out of memory: {first_line}", flush=True)
            else:
                print(f"  {name}: {type(e).__name__}: {clip(str(e))}", flush=True)
                traceback.print_tb(e.__traceback__, limit=-6, file=sys.stdout)
                sys.stdout.flush()
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception as e2:  # a sticky CUDA error: later cases will say so too
                print(f"  (after {name}: {type(e2).__name__}: {str(e2).splitlines()[0] if str(e2) else ''})",
                      flush=True)
            continue
        torch.cuda.empty_cache()
        frac = r["roof_us"] / r["us"]
        gbps = r["bytes"] / r["us"] * 1e-3
        print(f"RESULT {name} flashinfer {r['us']:.2f} us {gbps:.0f} GB/s roofline {frac:.3f} "
              f"ok {int(r['ok'])} err {r['rel_err']:.2e} kv_err {r['kv_err']:.2e} "
              f"deterministic {int(r['deterministic'])}" + (f" ({r['note']})" if r["note"] else ""),
              flush=True)
        rows.append((name, r["us"], r["bytes"], r["roof_us"], frac, r["ok"]))
        extra = {"roofline_fraction": frac, "bytes": float(r["bytes"]), "read_gbps": read_gbps,
                 "max_err": r["max_err"], "rel_err": r["rel_err"], "kv_err": r["kv_err"],
                 "deterministic": float(r["deterministic"]), "tensor_cores": float(r["tensor_cores"])}
        text = {"kv_layout": f"paged{PAGE_SIZE}", "rope": args.rope, "read_method": read_method,
                "flashinfer_version": fi.__version__, "torch_version": torch.__version__}
        if r["note"]:
            text["note"] = r["note"]
        records.append(make_record(name, gpu, r["us"], r["bytes"], r["ok"], extra, text, commit, date))

    print(f"# {'case':<28} {'median_us':>10} {'MB':>10} {'roof_us':>10} {'roofline':>9} {'ok':>3}")
    for name, us, nbytes, roof_us, frac, ok in rows:
        print(f"  {name:<28} {us:>10.1f} {nbytes / 1e6:>10.1f} {roof_us:>10.1f} {100 * frac:>8.1f}% "
              f"{int(ok):>3}")
    if args.json:
        write_json(args.json, records)
        print(f"# wrote {len(records)} records to {args.json}", flush=True)
    expected = len(args.model_list) * len(args.batch_list) * len(args.context_list)
    return 0 if len(rows) == expected and all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
