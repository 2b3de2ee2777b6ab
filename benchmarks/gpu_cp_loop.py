"""One rank's attention work under PyTorch's context parallel (the `allgather` rotation torchtitan's CP rows ran),
measured on one GPU with the communication left out: does the compute alone explain those rows' slowness (#9)?

docs/notes/context_parallel.md ("PyTorch's context parallel") reads the loop from pytorch/pytorch
`torch/distributed/tensor/experimental/_attention.py`; this script replays it for one rank, with every rank's K/V
already gathered (the all-gather and the dK/dV permutes are not run: only their local copies are):
- forward: step 0 the causal flash SDPA of the rank's shard (its two load-balanced chunks); steps 1..cp-1 unmasked:
  the whole local q against the first half of the source's K/V where the source rank is below this one, else the
  second half of q against all of it (`partial`); each step's output and log-sum-exp cast to fp32 and merged
  (`out - sigmoid(lse_b - lse) (out - out_b)`, `lse - logsigmoid(lse - lse_b)`, eager, as `_SDPAMerger` does
  uncompiled); the result cast back to bf16;
- backward: cp flash SDPA backward calls with the merged output and log-sum-exp, dQ accumulated in fp32, dK/dV
  added into an fp32 buffer and concatenated into the next send buffer after every step.
Times per layer and micro-batch for cp 1, 2, 4, 8, ranks 0 and cp-1, the SDPA kernels timed apart (CUDA events
around each call), so merges and accumulations are the rest. Shapes: Llama 3 8B (32 query heads after repeat_kv,
tp 1) and Llama 3.1 405B at tp 8 (16 local query heads), head dim 128, a 32768-token shard: every torchtitan CP row
(Tables 2 and 6, sequence = cp x 32768). Then `--sustain-s` of back-to-back unmasked steps with the clocks and power.

Run on a lent GPU:  python benchmarks/gpu_cp_loop.py --out benchmarks/data/h100/cp_loop
Smoke run:          python benchmarks/gpu_cp_loop.py --out /tmp/cp --device cpu --quick
Compare:            python benchmarks/cp_loop_compare.py --data benchmarks/data/h100/cp_loop/cp_loop.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gpu_bias_probe import _sync, gpu_state

# (name, local query heads, head dim, shard tokens)
CASES = [("llama3-8b-tp1", 32, 128, 32768), ("llama31-405b-tp8", 16, 128, 32768)]
QUICK_CASES = [("tiny", 2, 16, 128)]
CPS = (1, 2, 4, 8)


def _flash(dev):
    """(forward, backward) of the flash SDPA op PyTorch's context parallel calls, returning the log-sum-exp."""
    import torch
    aten = torch.ops.aten
    if dev == "cpu":
        def fwd(q, k, v, causal):
            out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
            return out, lse, None

        def bwd(g, q, k, v, out, lse, causal, ctx):
            return aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, lse, 0.0, causal)
        return fwd, bwd

    def fwd(q, k, v, causal):
        r = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
        return r[0], r[1], r[2:8]

    def bwd(g, q, k, v, out, lse, causal, ctx):
        cq, ck, mq, mk, seed, off = ctx
        return aten._scaled_dot_product_flash_attention_backward(g, q, k, v, out, lse, cq, ck, mq, mk, 0.0, causal,
                                                                 seed, off)
    return fwd, bwd


class _Timer:
    """CUDA events around the SDPA calls inside a loop, read after it (no synchronisation inside)."""

    def __init__(self, dev):
        self.dev, self.pairs, self.cpu = dev, [], 0.0

    def __call__(self, fn, *a):
        import torch
        if self.dev != "cuda":
            t = time.perf_counter()
            r = fn(*a)
            self.cpu += time.perf_counter() - t
            return r
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        r = fn(*a)
        e.record()
        self.pairs.append((s, e))
        return r

    def total(self) -> float:
        if self.dev != "cuda":
            return self.cpu
        return sum(s.elapsed_time(e) for s, e in self.pairs) / 1e3


def _merge(out, lse, b_out, b_lse):
    import torch.nn.functional as F
    out = out - F.sigmoid(b_lse - lse) * (out - b_out)
    lse = lse - F.logsigmoid(lse - b_lse)
    return out, lse


def forward_loop(q, kv_all, rank, cp, fwd, t_f=None):
    """The forward of `rank` of `cp`: (merged output in q's dtype, merged log-sum-exp, the steps' inputs)."""
    import torch
    t_f = t_f or (lambda fn, *a: fn(*a))
    half = q.shape[2] // 2
    steps, m_out, m_lse = [], None, None
    for i in range(cp):
        src = (rank - i) % cp
        k, v = kv_all[src]
        if i == 0:
            qq, kk, vv, causal, part = q, k, v, True, False
        elif i <= rank:
            qq, kk, vv, causal, part = q, k[:, :, :half], v[:, :, :half], False, False
        else:
            qq, kk, vv, causal, part = q[:, :, half:], k, v, False, True
        out, lse, ctx = t_f(fwd, qq, kk, vv, causal)
        steps.append((qq, kk, vv, causal, part, ctx))
        o32, l32 = out.float(), lse.float().unsqueeze(-1)
        if m_out is None:
            m_out, m_lse = o32, l32
        elif part:           # _partial_update: merge into the second half, cat the halves back
            o2, l2 = _merge(m_out[:, :, half:], m_lse[:, :, half:], o32, l32)
            m_out = torch.cat([m_out[:, :, :half], o2], dim=2)
            m_lse = torch.cat([m_lse[:, :, :half], l2], dim=2)
        else:
            m_out, m_lse = _merge(m_out, m_lse, o32, l32)
    return m_out.to(q.dtype), m_lse.squeeze(-1).contiguous(), steps


def rank_loop(q, kv_all, g, rank, cp, dev, fwd, bwd):
    """One layer's forward and backward attention for `rank` of `cp`; (fwd_s, fwd_sdpa_s, bwd_s, bwd_sdpa_s)."""
    import torch
    half = q.shape[2] // 2
    t_f = _Timer(dev)
    a = _event(dev)
    out, lse, steps = forward_loop(q, kv_all, rank, cp, fwd, t_f)
    b = _event(dev)
    t_b = _Timer(dev)
    dq = torch.zeros_like(q, dtype=torch.float32)
    send = None
    for (qq, kk, vv, causal, part, ctx) in steps:
        gg, oo, ll = (g, out, lse) if not part else (g[:, :, half:], out[:, :, half:], lse[:, :, half:])
        dq_, dk_, dv_ = t_b(bwd, gg, qq, kk, vv, oo, ll, causal, ctx)
        if part:
            dq[:, :, half:] += dq_
        else:
            dq += dq_
        # the received fp32 dK/dV of the full K/V, this step's gradient added, concatenated into the send buffer
        gk = torch.zeros(kk.shape[:2] + (2 * half,) + kk.shape[3:], device=q.device, dtype=torch.float32) \
            if send is None else send[0]
        gv = torch.zeros_like(gk) if send is None else send[1]
        if dk_.shape[2] == gk.shape[2]:
            gk += dk_
            gv += dv_
        else:
            gk[:, :, :half] += dk_
            gv[:, :, :half] += dv_
        flat = torch.cat([gk.flatten(), gv.flatten()])
        send = (flat[: gk.numel()].view_as(gk), flat[gk.numel():].view_as(gv))
    dq = dq.to(q.dtype)
    c = _event(dev)
    _sync(dev)
    f_s, b_s = _elapsed(a, b, dev), _elapsed(b, c, dev)
    return f_s, t_f.total(), b_s, t_b.total()


def _event(dev):
    import torch
    if dev == "cuda":
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    return time.perf_counter()


def _elapsed(a, b, dev) -> float:
    return a.elapsed_time(b) / 1e3 if dev == "cuda" else b - a


def part_loop(dev, quick, repeats):
    import torch
    fwd, bwd = _flash(dev)
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    rows = []
    for name, h, d, s in (QUICK_CASES if quick else CASES):
        q = torch.randn(1, h, s, d, device=dev, dtype=dtype)
        g = torch.randn_like(q)
        kv_all = [(torch.randn_like(q), torch.randn_like(q)) for _ in range(max(CPS))]
        causal_flops = 4.0 * s * s * h * d / 2        # step 0 forward; every other step does the same FLOPs
        for cp in CPS:
            for rank in sorted({0, cp - 1}):
                rank_loop(q, kv_all, g, rank, cp, dev, fwd, bwd)          # warm-up
                samples = [rank_loop(q, kv_all, g, rank, cp, dev, fwd, bwd) for _ in range(repeats)]
                med = [statistics.median(x[i] for x in samples) for i in range(4)]
                row = {"case": name, "heads": h, "head_dim": d, "shard": s, "cp": cp, "rank": rank,
                       "fwd_s": med[0], "fwd_sdpa_s": med[1], "bwd_s": med[2], "bwd_sdpa_s": med[3],
                       "fwd_sdpa_tflops": cp * causal_flops / med[1] / 1e12,
                       "bwd_sdpa_tflops": 2.5 * cp * causal_flops / med[3] / 1e12, **(gpu_state() if dev == "cuda"
                                                                                        else {})}
                rows.append(row)
                print(f"  {name} cp{cp} rank{rank}: fwd {med[0] * 1e3:.1f} ms (sdpa {med[1] * 1e3:.1f}), "
                      f"bwd {med[2] * 1e3:.1f} ms (sdpa {med[3] * 1e3:.1f}); sdpa fwd {row['fwd_sdpa_tflops']:.0f}"
                      f" bwd {row['bwd_sdpa_tflops']:.0f} TFLOP/s", flush=True)
        del q, g, kv_all
        if dev == "cuda":
            torch.cuda.empty_cache()
    return rows


def part_sustain(dev, quick, seconds):
    """Back-to-back unmasked steps (q = shard, K/V = half a shard), fwd + bwd, with clocks and power per window:
    is the flash kernel held at the power cap, as cuDNN's is on the H200 (docs/notes/gpu_h200.md)?"""
    import torch
    fwd, bwd = _flash(dev)
    name, h, d, s = (QUICK_CASES if quick else CASES)[0]
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    q = torch.randn(1, h, s, d, device=dev, dtype=dtype)
    k, v = torch.randn(1, h, s // 2, d, device=dev, dtype=dtype), torch.randn(1, h, s // 2, d, device=dev, dtype=dtype)
    g = torch.randn_like(q)
    flops = 3.5 * 4.0 * s * (s // 2) * h * d

    def one():
        out, lse, ctx = fwd(q, k, v, False)
        bwd(g, q, k, v, out, lse, False, ctx)
    one()
    _sync(dev)
    windows, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t, n = time.perf_counter(), 0
        while time.perf_counter() - t < 1.0:
            for _ in range(5):
                one()
            n += 5
            _sync(dev)
        dt = time.perf_counter() - t
        windows.append({"tflops": flops * n / dt / 1e12, **(gpu_state() if dev == "cuda" else {})})
    return {"case": name, "q": s, "kv": s // 2, "windows": windows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sustain-s", type=float, default=15.0)
    a = ap.parse_args(argv)
    import torch
    os.makedirs(a.out, exist_ok=True)
    res = {"torch": torch.__version__, "created": time.strftime("%Y-%m-%d %H:%M"),
           **({"gpu": torch.cuda.get_device_name(0), **gpu_state()} if a.device == "cuda" else {"device": "cpu"})}
    status = 0
    for key, fn in (("loop", lambda: part_loop(a.device, a.quick, a.repeats)),
                    ("sustain", lambda: part_sustain(a.device, a.quick, a.sustain_s))):
        t = time.perf_counter()
        try:
            res[key] = fn()
        except Exception as e:            # keep what was measured
            res[key], status = {"error": f"{type(e).__name__}: {e}"[:300]}, 1
        print(f"{key}: {time.perf_counter() - t:.1f} s", flush=True)
        with open(os.path.join(a.out, "cp_loop.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
