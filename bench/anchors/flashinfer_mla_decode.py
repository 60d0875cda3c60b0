#!/usr/bin/env python3
"""FlashInfer peer for `tessera bench decode --models deepseek-v2-lite`: one DeepSeek-V2-Lite
attention block (MLA) at decode, run as SGLang's absorbed MLA path runs it with its FlashInfer
backend, captured in one CUDA graph and replayed.

Per step (all bf16, batch B, every sequence adds one token at position C-1):
  xn  = flashinfer.norm.rmsnorm(x, w_norm)                         input RMSNorm
  q   = xn @ Wq^T        [B, H, 128 + 64]                          torch GEMM (no q LoRA: V2-Lite)
  lat = xn @ Wkv_a^T     [B, 512 + 64]                             torch GEMM
  c   = flashinfer.norm.rmsnorm(lat[:, :512], kv_a_norm)           kv_a_layernorm (a contiguous copy
                                                                   first, as SGLang makes one)
  RoPE, interleaved pairs (DeepSeek's style, as Tessera's kernels and reference rotate), on the
  query's rope part and the latent's kr: flashinfer.rope.apply_rope_pos_ids_inplace
  flashinfer.page.append_paged_mla_kv_cache(c, kr, ...)            page size 16
  ql  = bmm(q_nope, W_UK)  [B, H, 512]                             the absorbed query
  ol  = BatchMLAPagedAttentionWrapper(use_cuda_graph=True).run(ql, q_pe, ckv, kpe)
        planned once, outside the graph; softmax scale 1/sqrt(128 + 64)
  o   = bmm(ol, W_UV^T)  [B, H, 128]                               the value up-projection
  out = o @ Wo^T                                                   torch GEMM
W_UK and W_UV are Wkv_b's per-head row blocks ([H][128 + 128][512]), made contiguous once.
Timing, semantics, bytes and records as bench/anchors/flashinfer_decode.py (whose helpers this
script imports): bytes = every weight once + B * (C - 1) * (512 + 64) * 2 (latent rows read),
as tools/tessera/bench_decode.cc counts them for its MLA cases.

Correctness, once per case, on the replayed graph's result: sequences 0 and B-1 against a
float32 torch computation of the same block; the appended latent row against the reference's.
A second replay must give bitwise the same output.

On the GPU machine, with the FlashInfer wheels in .whl/ (see flashinfer_decode.py):
  python3 bench/anchors/flashinfer_mla_decode.py --json $OUT/flashinfer_mla_decode.json
--dry-run needs neither torch nor a GPU.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flashinfer_decode import (PAGE_SIZE, add_case_args, capture_check_time,  # noqa: E402
                               check_case_args, clip, current_commit, current_date, make_record,
                               measure_read_gbps, start_gpu, write_json)

# src/decode/model_config.cc's deepseek_v2_lite().
MODEL = {"name": "deepseek-v2-lite", "hidden": 2048, "heads": 16, "rank": 512, "rope": 64,
         "nope": 128, "v": 128, "theta": 10000.0, "eps": 1e-6}


def weight_shapes(m):
    H, R, Dr, Dn, Dv, hidden = m["heads"], m["rank"], m["rope"], m["nope"], m["v"], m["hidden"]
    return {"wq": (H * (Dn + Dr), hidden), "wkv_a": (R + Dr, hidden), "kv_a_norm": (R,),
            "wkv_b": (H * (Dn + Dv), R), "wo": (hidden, H * Dv), "w_norm": (hidden,)}


def block_bytes(m, batch, context):
    weights = sum(math.prod(s) for s in weight_shapes(m).values())
    return (weights + batch * (context - 1) * (m["rank"] + m["rope"])) * 2


def case_name(batch, context):
    return f"{MODEL['name']} b{batch} ctx{context}"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap)
    ap.add_argument("--backend", choices=["auto", "fa2", "fa3"], default="auto",
                    help="BatchMLAPagedAttentionWrapper's backend (auto: fa3 on Hopper)")
    ap.add_argument("--workspace-mib", type=int, default=128, help="MLA float workspace buffer")
    args = ap.parse_args(argv)
    check_case_args(args, "flashinfer_mla_decode.py")
    return args


def rope_interleaved_ref(torch, x, pos, theta):
    """x [..., D] float32, pairs (2i, 2i+1) rotated by pos * theta^(-2i/D) (angles in float64)."""
    D = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = pos * inv
    cos = ang.cos().to(torch.float32).to(x.device)
    sin = ang.sin().to(torch.float32).to(x.device)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


class MlaBlock:
    def __init__(self, torch, fi, batch, context, args, device):
        self.torch, self.fi, self.batch, self.context, self.args = torch, fi, batch, context, args
        m = MODEL
        H, R, Dr, Dn, Dv = m["heads"], m["rank"], m["rope"], m["nope"], m["v"]
        self.H, self.R, self.Dr, self.Dn, self.Dv = H, R, Dr, Dn, Dv
        dt, i32, B = torch.bfloat16, torch.int32, batch

        def uniform(shape, lo, hi):
            return torch.empty(shape, dtype=dt, device=device).uniform_(lo, hi)

        self.w = {}
        for name, shape in weight_shapes(m).items():
            if len(shape) == 1:
                self.w[name] = uniform(shape, 0.5, 1.5)
            else:
                s = 1.0 / math.sqrt(shape[1])
                self.w[name] = uniform(shape, -s, s)
        per_head = self.w["wkv_b"].view(H, Dn + Dv, R)
        self.w_uk = per_head[:, :Dn, :].contiguous()                  # [H, Dn, R]
        self.w_uv_t = per_head[:, Dn:, :].transpose(1, 2).contiguous()  # [H, R, Dv]
        self.x = uniform((B, m["hidden"]), -1.0, 1.0)

        self.pages_per_seq = (context + PAGE_SIZE - 1) // PAGE_SIZE
        num_pages = B * self.pages_per_seq
        self.ckv_cache = uniform((num_pages, PAGE_SIZE, R), -1.0, 1.0)
        self.kpe_cache = uniform((num_pages, PAGE_SIZE, Dr), -1.0, 1.0)
        self.kv_indptr = torch.arange(B + 1, dtype=i32, device=device) * self.pages_per_seq
        self.kv_indices = torch.arange(num_pages, dtype=i32, device=device)
        last = context - (self.pages_per_seq - 1) * PAGE_SIZE
        self.kv_last_page_len = torch.full((B,), last, dtype=i32, device=device)
        self.kv_lens = torch.full((B,), context, dtype=i32, device=device)
        self.qo_indptr = torch.arange(B + 1, dtype=i32, device=device)
        self.batch_indices = torch.arange(B, dtype=i32, device=device)
        self.positions = torch.full((B,), context - 1, dtype=i32, device=device)

        # Static activations.
        self.xn = torch.empty((B, m["hidden"]), dtype=dt, device=device)
        self.q = torch.empty((B, H * (Dn + Dr)), dtype=dt, device=device)
        self.q3 = self.q.view(B, H, Dn + Dr)
        self.lat = torch.empty((B, R + Dr), dtype=dt, device=device)
        self.c_in = torch.empty((B, R), dtype=dt, device=device)
        self.c = torch.empty((B, R), dtype=dt, device=device)
        self.kr = torch.empty((B, 1, Dr), dtype=dt, device=device)
        self.ql_hb = torch.empty((H, B, R), dtype=dt, device=device)
        self.q_all = torch.empty((B, H, R + Dr), dtype=dt, device=device)  # [ql | q_pe], SGLang's
        self.ol = torch.empty((B, H, R), dtype=dt, device=device)
        self.o_hb = torch.empty((H, B, Dv), dtype=dt, device=device)
        self.o = torch.empty((B, H * Dv), dtype=dt, device=device)
        self.out = torch.empty((B, m["hidden"]), dtype=dt, device=device)

        self.workspace = torch.zeros(args.workspace_mib << 20, dtype=torch.uint8, device=device)
        bufs = [torch.empty_like(t) for t in (self.qo_indptr, self.kv_indptr, self.kv_indices, self.kv_lens)]
        self.wrapper = fi.mla.BatchMLAPagedAttentionWrapper(
            self.workspace, use_cuda_graph=True, qo_indptr=bufs[0], kv_indptr=bufs[1],
            kv_indices=bufs[2], kv_len_arr=bufs[3], backend=args.backend)
        self.sm_scale = 1.0 / math.sqrt(Dn + Dr)
        self.wrapper.plan(self.qo_indptr, self.kv_indptr, self.kv_indices, self.kv_lens, H, R, Dr,
                          PAGE_SIZE, False, self.sm_scale, dt, dt)

    def step(self):
        torch, fi, m = self.torch, self.fi, MODEL
        R, Dn = self.R, self.Dn
        fi.norm.rmsnorm(self.x, self.w["w_norm"], m["eps"], out=self.xn)
        torch.mm(self.xn, self.w["wq"].t(), out=self.q)
        torch.mm(self.xn, self.w["wkv_a"].t(), out=self.lat)
        self.c_in.copy_(self.lat[:, :R])
        fi.norm.rmsnorm(self.c_in, self.w["kv_a_norm"], m["eps"], out=self.c)
        self.kr[:, 0].copy_(self.lat[:, R:])
        q_pe = self.q_all[:, :, R:]
        q_pe.copy_(self.q3[:, :, Dn:])
        fi.rope.apply_rope_pos_ids_inplace(q_pe, self.kr, self.positions, interleave=True,
                                           rope_scale=1.0, rope_theta=m["theta"])
        fi.page.append_paged_mla_kv_cache(self.c, self.kr[:, 0], self.batch_indices, self.positions,
                                          self.ckv_cache, self.kpe_cache, self.kv_indices,
                                          self.kv_indptr, self.kv_last_page_len)
        torch.bmm(self.q3[:, :, :Dn].transpose(0, 1), self.w_uk, out=self.ql_hb)
        self.q_all[:, :, :R].copy_(self.ql_hb.transpose(0, 1))
        self.wrapper.run(self.q_all[:, :, :R], q_pe, self.ckv_cache, self.kpe_cache, out=self.ol)
        torch.bmm(self.ol.transpose(0, 1), self.w_uv_t, out=self.o_hb)
        self.o.view(self.batch, self.H, self.Dv).copy_(self.o_hb.transpose(0, 1))
        torch.mm(self.o, self.w["wo"].t(), out=self.out)

    def reference(self, b):
        """float32 block for sequence b over the cache as it is now. Returns (out, c, kr)."""
        torch, m = self.torch, MODEL
        H, R, Dr, Dn = self.H, self.R, self.Dr, self.Dn
        w = {k: v.float() for k, v in self.w.items()}

        def rms(v, g):
            return v * torch.rsqrt(v.pow(2).mean() + m["eps"]) * g

        pos = self.context - 1
        xn = rms(self.x[b].float(), w["w_norm"])
        q = (w["wq"] @ xn).view(H, Dn + Dr)
        lat = w["wkv_a"] @ xn
        c = rms(lat[:R], w["kv_a_norm"])
        kr = rope_interleaved_ref(torch, lat[R:], pos, m["theta"])
        q_pe = rope_interleaved_ref(torch, q[:, Dn:], pos, m["theta"])
        ql = torch.einsum("hd,hdr->hr", q[:, :Dn], self.w_uk.float())  # [H, R]
        first = b * self.pages_per_seq
        pages = self.kv_indices[first:first + self.pages_per_seq].long()
        c_all = torch.cat((self.ckv_cache[pages].reshape(-1, R)[:pos].float(), c[None]), 0)
        kr_all = torch.cat((self.kpe_cache[pages].reshape(-1, Dr)[:pos].float(), kr[None]), 0)
        scores = (ql @ c_all.t() + q_pe @ kr_all.t()) * self.sm_scale  # [H, C]
        ol = torch.softmax(scores, dim=-1) @ c_all                      # [H, R]
        o = torch.einsum("hr,hrv->hv", ol, self.w_uv_t.float()).reshape(-1)
        return w["wo"] @ o, c, kr

    def appended_row(self, b):
        pos = self.context - 1
        page = int(self.kv_indices[b * self.pages_per_seq + pos // PAGE_SIZE])
        return self.ckv_cache[page, pos % PAGE_SIZE].float(), self.kpe_cache[page, pos % PAGE_SIZE].float()

    def check(self):
        """Sequences 0 and B-1 against the reference. Returns (ok, max_err, rel_err, kv_err)."""
        tol = self.args.tol
        ok, worst_abs, worst_rel, worst_kv = True, 0.0, 0.0, 0.0
        for b in sorted({0, self.batch - 1}):
            ref, c, kr = self.reference(b)
            err = float((self.out[b].float() - ref).abs().max())
            scale = float(ref.abs().max())
            rel = err / scale if scale > 0 else float("inf")
            cs, krs = self.appended_row(b)
            kv = max(float((cs - c).abs().max()) / max(float(c.abs().max()), 1e-30),
                     float((krs - kr).abs().max()) / max(float(kr.abs().max()), 1e-30))
            ok = ok and rel <= tol and kv <= tol
            worst_abs, worst_rel, worst_kv = max(worst_abs, err), max(worst_rel, rel), max(worst_kv, kv)
        return ok, worst_abs, worst_rel, worst_kv


def run_case(torch, fi, batch, context, args, read_gbps):
    torch.manual_seed(args.seed)
    block = MlaBlock(torch, fi, batch, context, args, "cuda")
    us, (ok, err, rel, kv_err), deterministic = capture_check_time(torch, block, args)
    nbytes = block_bytes(MODEL, batch, context)
    res = {"us": us, "bytes": nbytes, "roof_us": nbytes / read_gbps * 1e-3, "ok": ok, "max_err": err,
           "rel_err": rel, "kv_err": kv_err, "deterministic": deterministic}
    del block
    return res


def dry_run(args):
    gbps = args.read_gbps if args.read_gbps > 0 else 4300.0
    commit, date = current_commit(), current_date()
    print(f"# dry run: nothing measured; roofline times at {gbps:.0f} GB/s", flush=True)
    records = []
    for batch in args.batch_list:
        for context in args.context_list:
            name, nbytes = case_name(batch, context), block_bytes(MODEL, batch, context)
            print(f"  {name:<34} {nbytes / 1e6:>10.1f} MB {nbytes / gbps * 1e-3:>10.1f} us at the roofline")
            records.append(make_record(name, "none", 0.0, nbytes, False,
                                       {"bytes": float(nbytes), "read_gbps": gbps, "roofline_fraction": 0.0},
                                       {"kv_layout": f"paged{PAGE_SIZE}", "note": "dry run: nothing measured"},
                                       commit, date))
    if args.json:
        write_json(args.json, records)
        print(f"# wrote {len(records)} records to {args.json}", flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    torch, fi, gpu, import_s = start_gpu("flashinfer_mla_decode.py", ["mla", "norm", "page", "rope"])
    print(f"# flashinfer {fi.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
          f"{gpu}; MLA backend {args.backend}; imports {import_s:.1f} s", flush=True)
    if args.read_gbps > 0:
        read_gbps, read_method = args.read_gbps, "given"
    else:
        read_gbps, read_method, _ = measure_read_gbps(torch, args.read_gib, args.read_iters)
    print(f"# streaming read: {read_gbps:.0f} GB/s ({read_method})", flush=True)

    commit, date = current_commit(), current_date()
    records, rows = [], []
    for batch in args.batch_list:
        for context in args.context_list:
            name = case_name(batch, context)
            try:
                r = run_case(torch, fi, batch, context, args, read_gbps)
            except Exception as e:  # report, free, go on with the next case
                print(f"  {name}: {type(e).__name__}: {clip(str(e))}", flush=True)
                try:
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                except Exception:
                    pass
                continue
            torch.cuda.empty_cache()
            frac = r["roof_us"] / r["us"]
            print(f"RESULT {name} flashinfer {r['us']:.2f} us {r['bytes'] / r['us'] * 1e-3:.0f} GB/s "
                  f"roofline {frac:.3f} ok {int(r['ok'])} err {r['rel_err']:.2e} kv_err {r['kv_err']:.2e} "
                  f"deterministic {int(r['deterministic'])}", flush=True)
            rows.append((name, r["us"], frac, r["ok"]))
            extra = {"roofline_fraction": frac, "bytes": float(r["bytes"]), "read_gbps": read_gbps,
                     "max_err": r["max_err"], "rel_err": r["rel_err"], "kv_err": r["kv_err"],
                     "deterministic": float(r["deterministic"])}
            text = {"kv_layout": f"paged{PAGE_SIZE}", "read_method": read_method, "mla_backend": args.backend,
                    "flashinfer_version": fi.__version__, "torch_version": torch.__version__}
            records.append(make_record(name, gpu, r["us"], r["bytes"], r["ok"], extra, text, commit, date))
    print(f"# {'case':<34} {'median_us':>10} {'roofline':>9} {'ok':>3}")
    for name, us, frac, ok in rows:
        print(f"  {name:<34} {us:>10.1f} {100 * frac:>8.1f}% {int(ok):>3}")
    if args.json:
        write_json(args.json, records)
        print(f"# wrote {len(records)} records to {args.json}", flush=True)
    expected = len(args.batch_list) * len(args.context_list)
    return 0 if len(rows) == expected and all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
