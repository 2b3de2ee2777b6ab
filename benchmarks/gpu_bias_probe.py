"""The measurements that would settle the too-fast bias on H100/H200 rows (issues #8 and #9), in one command.

docs/notes/published_recipes.md ("Where #8's validation stands") and docs/notes/fsdp.md ("Eager torchtitan") name
what no lent GPU has measured yet: GEMM throughput sustained for minutes rather than in short bursts (clocks under
the power limit), fp8 GEMMs at the recipes' shapes, fused attention's back ends (flash, cuDNN), eager element-wise
kernels, and a whole Llama layer against the compute model's prediction of it. This script measures each, writes
one JSON file per part as soon as the part is done (a failing part is recorded, the others still run) and prints a
summary beside the planner's figures for the same work (the shipped compute profile of the GPU's type).

Run on a lent GPU:   python benchmarks/gpu_bias_probe.py --out benchmarks/data/h200/bias_probe [--sustain-s 60]
Smoke run anywhere:  python benchmarks/gpu_bias_probe.py --out /tmp/probe --device cpu --quick
The recipes' own attention calls (per GPU: micro-batch, query heads / tp, the cp shard), for the next lease:
    python benchmarks/gpu_bias_probe.py --write-recipe-attention     # CPU: benchmarks/data/recipe_attention_shapes.json
    python benchmarks/gpu_bias_probe.py --out OUT --parts attention --attn-shapes benchmarks/data/recipe_attention_shapes.json
Plain PyTorch only (no Transformer Engine): fp8 GEMMs go through torch._scaled_mm with per-tensor scales, which is
the cuBLASLt kernel TE's tensor-wise recipes call too; TE's own per-GEMM host work is not in it.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
RECIPE_ATTN = os.path.join(HERE, "data", "recipe_attention_shapes.json")

# (name, M tokens, K, N): one GEMM of each recipe's layer, forward (docs/notes/published_recipes.md rows)
GEMMS = [
    ("square-8192", 8192, 8192, 8192),
    ("llama2-7b-fc1-tp1-s4096", 4096, 4096, 22016),         # NeMo 24.07 Llama 2 7B fp8, tp 1 (gated: 2 x 11008)
    ("llama2-7b-qkv-tp1-s4096", 4096, 4096, 12288),
    ("llama3-70b-fc1-tp4-s8192", 8192, 8192, 14336),        # Megatron-Bridge Llama 3 70B, tp 4 (2 x 28672 / 4)
    ("llama3-70b-fc2-tp4-s8192", 8192, 7168, 8192),
    ("llama31-405b-fc1-tp8-s8192", 8192, 16384, 13312),     # 405B, tp 8 (2 x 53248 / 8)
    ("gpt3-175b-qkv-tp8-s2048", 2048, 12288, 4608),         # Korthikanti 175B, tp 8
]
QUICK_GEMMS = [("tiny", 64, 64, 96)]
# (name, batch, local heads, query length, key length, head dim, causal): the recipes' shapes and the grid of
# costs.compute's FUSED_ATTENTION_EFFICIENCY (512-16384, head dim 128) and past it (32768: the CP rows' shard), plus
# the unmasked steps of PyTorch's context parallel (a shard's queries against half a shard's keys).
ATTN = [(f"causal-s{s}", b, 32, s, s, 128, True)
        for s, b in ((512, 16), (1024, 16), (2048, 8), (4096, 4), (8192, 2), (16384, 1), (32768, 1))] + [
        ("llama-s8192-h16", 2, 16, 8192, 8192, 128, True), ("llama-s16384-h8", 1, 8, 16384, 16384, 128, True)] + [
        (f"full-s{s}", b, 32, s, s, 128, False) for s, b in ((2048, 8), (8192, 2), (16384, 1))] + [
        ("cp-step-q32768-k16384", 1, 32, 32768, 16384, 128, False)]
QUICK_ATTN = [("tiny", 1, 2, 64, 64, 16, True), ("tiny-full", 1, 2, 64, 32, 16, False)]


def _sync(dev):
    if dev == "cuda":
        import torch
        torch.cuda.synchronize()


def timed(fn, dev: str, repeats: int, warmup: int = 3) -> list[float]:
    """Seconds per call, one sample per call, after `warmup` calls (CUDA events on a GPU)."""
    import torch
    for _ in range(warmup):
        fn()
    _sync(dev)
    out = []
    for _ in range(repeats):
        if dev == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return out


def _smi(fields: str) -> list[str] | None:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return [x.strip() for x in r.stdout.strip().split(",")]


def gpu_state() -> dict:
    """SM clock (MHz), power (W) and temperature (C) now, from nvidia-smi, and why the clock is held down where the
    driver names it (`clocks_event_reasons` in recent drivers, `clocks_throttle_reasons` before); {} without one.
    The reason is asked separately: a field this driver does not know must not cost the clocks."""
    base = _smi("clocks.sm,power.draw,temperature.gpu")
    if not base or len(base) < 3:
        return {}
    out = {}
    for key, v in zip(("sm_MHz", "power_W", "temp_C"), base):
        try:
            out[key] = float(v)
        except ValueError:       # "[N/A]" on some parts
            pass
    for field in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        why = _smi(field)
        if why:
            out["throttle"] = why[0]
            break
    return out


def _gemm_fn(m, k, n, dtype, dev):
    import torch
    a = torch.randn(m, k, device=dev).to(dtype)
    b = torch.randn(k, n, device=dev).to(dtype)
    return lambda: a @ b


def _fp8_fn(m, k, n, dev, fast_accum=False):
    """torch._scaled_mm, e4m3 both sides, per-tensor scales, bf16 out: B column-major as cuBLASLt wants it.
    fast_accum: cuBLASLt's fast fp8 accumulation, which Transformer Engine uses for fprop (its dgrad and wgrad
    GEMMs use the split accumulator, use_fast_accum False)."""
    import torch
    a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast_accum)


def part_gemm(dev, quick, repeats):
    import torch
    rows = []
    for name, m, k, n in (QUICK_GEMMS if quick else GEMMS):
        flops = 2.0 * m * k * n
        for kind in ("bf16", "fp8"):
            row = {"name": name, "m": m, "k": k, "n": n, "dtype": kind}
            try:
                fn = _fp8_fn(m, k, n, dev) if kind == "fp8" else _gemm_fn(m, k, n, torch.bfloat16, dev)
                t = statistics.median(timed(fn, dev, repeats))
                row.update(seconds=t, tflops=flops / t / 1e12)
            except Exception as e:          # fp8 on a CPU or an older GPU: recorded, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[:200]
            rows.append(row)
    return rows


def part_gemm_warm(dev, quick, repeats, warm_s=2.0):
    """Each recipe shape in bf16, fp8 (split accumulator) and fp8 with fast accumulation, timed twice: a burst of
    `repeats` calls, and the same after `warm_s` of back-to-back calls (clocks at the power limit)."""
    import torch
    rows = []
    for name, m, k, n in (QUICK_GEMMS if quick else GEMMS):
        flops = 2.0 * m * k * n
        for kind in ("bf16", "fp8", "fp8_fast"):
            row = {"name": name, "m": m, "k": k, "n": n, "dtype": kind}
            try:
                fn = (_gemm_fn(m, k, n, torch.bfloat16, dev) if kind == "bf16"
                      else _fp8_fn(m, k, n, dev, fast_accum=kind == "fp8_fast"))
                burst = statistics.median(timed(fn, dev, repeats))
                t_end = time.perf_counter() + (0.05 if quick else warm_s)
                while time.perf_counter() < t_end:
                    for _ in range(10):
                        fn()
                    _sync(dev)
                warm = statistics.median(timed(fn, dev, repeats, warmup=0))
                row.update(burst_s=burst, warm_s=warm, burst_tflops=flops / burst / 1e12,
                           warm_tflops=flops / warm / 1e12, **gpu_state())
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:200]
            rows.append(row)
    return rows


def part_sustained(dev, quick, seconds):
    """One large GEMM back to back for `seconds` (bf16, then fp8): throughput and clocks per window of ~1 s."""
    import torch
    m, k, n = (64, 64, 64) if quick else (8192, 8192, 8192)
    out = {}
    for kind in ("bf16", "fp8", "attention"):
        try:
            if kind == "attention":        # causal fused SDPA fwd+bwd, 1 x 32 heads x 16384 x 128 (default back end)
                b_, h_, s_, d_ = (1, 2, 64, 16) if quick else (1, 32, 16384, 128)
                dty = torch.float32 if dev == "cpu" else torch.bfloat16
                qkv = [torch.randn(b_, h_, s_, d_, device=dev, dtype=dty, requires_grad=True) for _ in range(3)]
                fn = functools.partial(_attn_fwd_bwd, *qkv, torch.randn(b_, h_, s_, d_, device=dev, dtype=dty))
                flops = 3.5 * 4.0 * b_ * h_ * s_ * s_ * d_ / 2
            else:
                fn = _fp8_fn(m, k, n, dev) if kind == "fp8" else _gemm_fn(m, k, n, torch.bfloat16, dev)
                flops = 2.0 * m * k * n
        except Exception as e:
            out[kind] = {"error": f"{type(e).__name__}: {e}"[:200]}
            continue
        window = min(1.0, seconds / 10)                # ~1 s windows; at least ten of them
        per = max(1, int(window / max(statistics.median(timed(fn, dev, 3)), 1e-6)))
        windows, t_end = [], time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            for _ in range(per):
                fn()
            _sync(dev)
            dt = time.perf_counter() - t
            windows.append({"t_s": round(seconds - (t_end - time.perf_counter()), 2),
                            "tflops": flops * per / dt / 1e12, **gpu_state()})
        first, last = windows[: max(1, len(windows) // 10)], windows[-max(1, len(windows) // 4):]
        out[kind] = {"shape": [m, k, n] if kind != "attention" else [b_, h_, s_, d_], "windows": windows,
                     "first_tflops": statistics.mean(w["tflops"] for w in first),
                     "last_tflops": statistics.mean(w["tflops"] for w in last)}
    return out


def _attn_fwd_bwd(q, k, v, g, causal=True):
    import torch.nn.functional as F
    F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g)


def recipe_attention_shapes(path: str | None = RECIPE_ATTN) -> dict:
    """Every Hopper recipe row's attention calls on one GPU, as ATTN rows (name, batch, local heads, query length, key
    length, head dim, causal): the micro-batch, the query heads per TP rank (the kernels' FLOPs follow the query
    heads; K / V are given as many), and with context parallelism the shard: the causal call at s / cp, which
    costs.compute charges at fused_attention_efficiency(s / cp), and the ring's unmasked step (s / cp queries against
    s / 2cp keys). Written to `path` (None: not written) as {"rows": {id: [names]}, "shapes": [...]}."""
    from published_recipes import DATA, build, load_rows
    out, seen = {"rows": {}, "shapes": []}, set()
    for data in (DATA, os.path.join(HERE, "data", "published_recipes_fsdp.yaml")):
        for row in load_rows(data)[1]:
            spec, cfg, _, _ = build(row)
            gpu = spec.cluster.gpu.type.upper()
            if "H100" not in gpu and "H200" not in gpu:
                continue
            m, cp = spec.model, getattr(cfg, "cp", 1)
            b, h, s, d = cfg.micro_batch_size, m.num_attention_heads // cfg.tp, spec.training.seq_length // cp, m.head_dim
            calls = [(f"b{b}-h{h}-s{s}-causal", b, h, s, s, d, True)]
            if cp > 1:
                calls.append((f"b{b}-h{h}-q{s}-k{s // 2}-full", b, h, s, s // 2, d, False))
            out["rows"][row["id"]] = [c[0] for c in calls]
            for c in calls:
                if c[0] not in seen:
                    seen.add(c[0])
                    out["shapes"].append(list(c))
    if path:
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def part_attention(dev, quick, repeats, shapes=None):
    """SDPA forward and forward+backward per back end, causal and unmasked: achieved TFLOP/s on the FLOPs the kernel
    does (4 b h sq sk d forward, halved under the causal mask; backward 2.5x), costs.compute's count."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("math", SDPBackend.MATH)] if dev == "cpu" else [
        ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    rows = []
    for name, b, h, s, sk, d, causal in (shapes or (QUICK_ATTN if quick else ATTN)):
        fwd_flops = 4.0 * b * h * s * sk * d / (2 if causal else 1)      # QK^T and PV
        q = torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(b, h, sk, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(2))
        g = torch.randn(b, h, s, d, device=dev, dtype=dtype)
        for bname, be in backends:
            row = {"name": name, "b": b, "heads": h, "seq": s, "kv_seq": sk, "head_dim": d, "causal": causal,
                   "backend": bname}
            try:
                with sdpa_kernel([be]):
                    fwd = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
                    tf = statistics.median(timed(fwd, dev, repeats))
                    tfb = statistics.median(timed(functools.partial(_attn_fwd_bwd, q, k, v, g, causal), dev,
                                                  repeats))
                    if dev == "cuda":       # the kernel's working memory beyond q, k, v, g and their gradients
                        q.grad = k.grad = v.grad = None
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        row["fwd_kept_bytes"] = torch.cuda.memory_allocated() - base     # output + saved stats
                        out.backward(g)
                        del out
                        torch.cuda.synchronize()
                        row["fwd_bwd_peak_bytes"] = torch.cuda.max_memory_allocated() - base
                        row["tensor_bytes"] = q.numel() * q.element_size()
                        q.grad = k.grad = v.grad = None
                row.update(fwd_s=tf, fwd_bwd_s=tfb, fwd_tflops=fwd_flops / tf / 1e12,
                           fwd_bwd_tflops=3.5 * fwd_flops / tfb / 1e12)   # backward: 2.5x the forward's FLOPs
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:200]
            rows.append(row)
    return rows


def part_elementwise(dev, quick, repeats):
    """torchtitan's eager element-wise kernels at Llama 3 8B's shape (16,384 tokens x 4,096; SwiGLU 14,336):
    achieved bytes/s with each kernel reading its inputs and writing its output once (costs.compute's count)."""
    import torch
    tokens, h, f = (64, 32, 96) if quick else (16384, 4096, 14336)
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    x = torch.randn(tokens, h, device=dev, dtype=dtype)
    y = torch.randn(tokens, h, device=dev, dtype=dtype)
    gate = torch.randn(tokens, f, device=dev, dtype=dtype)
    up = torch.randn(tokens, f, device=dev, dtype=dtype)
    w = torch.ones(h, device=dev, dtype=dtype)
    by = x.element_size()

    def rmsnorm():                      # torchtitan norms.py, eager: fp32 cast, pow, mean, add, rsqrt, mul, cast, mul
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w

    kernels = {
        "copy": (lambda: x.clone(), 2 * tokens * h * by),
        "residual_add": (lambda: x + y, 3 * tokens * h * by),
        "silu_mul": (lambda: torch.nn.functional.silu(gate) * up, (2 * 2 + 3) * tokens * f * by),
        # cast in (b+4), pow (8), mean (4 + ~0), mul by rsqrt (8 + ~0), cast out (4+b), mul by w (2b)
        "rmsnorm_eager": (rmsnorm, tokens * h * (by + 4 + 8 + 4 + 8 + 4 + by + 2 * by)),
    }
    rows = []
    for name, (fn, nbytes) in kernels.items():
        t = statistics.median(timed(fn, dev, repeats))
        rows.append({"name": name, "seconds": t, "bytes": nbytes, "GBps": nbytes / t / 1e9})
    return rows


def _layer_step(x, p, heads):
    """Forward and backward of one pre-norm Llama layer (RMSNorm, fused causal SDPA, SwiGLU) on x: (b, s, h)."""
    import torch.nn.functional as F
    b, s, h = x.shape
    n1 = F.rms_norm(x, (h,))
    q, k, v = (n1 @ p["wqkv"]).view(b, s, 3, heads, h // heads).permute(2, 0, 3, 1, 4)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
    r = x + a @ p["wo"]
    g, u = (F.rms_norm(r, (h,)) @ p["w13"]).chunk(2, dim=-1)
    out = r + (F.silu(g) * u) @ p["w2"]
    out.sum().backward()


def part_layer(dev, quick, repeats, sustain_s):
    """A Llama layer in plain PyTorch (bf16, fused SDPA, gated MLP; no tensor parallelism), forward + backward, in a
    short burst and after `sustain_s` of back-to-back steps, against the compute model's prediction of the same layer."""
    import torch
    cases = [("tiny", 1, 64, 32, 2, 96)] if quick else [
        ("llama2-7b-s4096-mbs1", 1, 4096, 4096, 32, 11008), ("llama3-8b-s8192-mbs2", 2, 8192, 4096, 32, 14336)]
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    rows = []
    for name, b, s, h, heads, f in cases:
        p = {k: torch.randn(*shape, device=dev, dtype=dtype) * 0.02
             for k, shape in (("wqkv", (h, 3 * h)), ("wo", (h, h)), ("w13", (h, 2 * f)), ("w2", (f, h)))}
        for t in p.values():
            t.requires_grad_(True)
        x = torch.randn(b, s, h, device=dev, dtype=dtype, requires_grad=True)

        step = functools.partial(_layer_step, x, p, heads)
        burst = statistics.median(timed(step, dev, repeats))
        t_end = time.perf_counter() + sustain_s
        while time.perf_counter() < t_end:
            step()
        _sync(dev)
        sustained = statistics.median(timed(step, dev, repeats, warmup=0))
        rows.append({"name": name, "b": b, "seq": s, "hidden": h, "heads": heads, "ffn": f,
                     "burst_s": burst, "sustained_s": sustained, "after_s": sustain_s, **gpu_state()})
    return rows


CLUSTERS = {"H100": "dgx-h100.yaml", "H200": "dgx-h200.yaml"}


def model_layer_s(row: dict, gpu_type: str) -> float | None:
    """The planner's forward + backward of the same layer (one micro-batch, tp 1, bf16, fused attention)."""
    try:
        from planner.config import ParallelConfig
        from planner.costs import default_costs
        from planner.io import load_yaml
        from planner.spec import parse_spec
        cluster = load_yaml(os.path.join(os.path.dirname(__file__), "..", "clusters", CLUSTERS[gpu_type]))
        model = {"name": "probe", "family": "llama", "num_layers": 1, "hidden_size": row["hidden"],
                 "num_attention_heads": row["heads"], "ffn_hidden_size": row["ffn"], "vocab_size": 32000}
        spec = parse_spec({"name": "probe", "model": model, "cluster": cluster,
                           "training": {"global_batch_size": row["b"], "seq_length": row["seq"]}}, "probe.yaml")
        cm = default_costs(spec.cluster).compute
        cfg = ParallelConfig(1, 1, 1, row["b"], 1, "1f1b", 1, "none", 0, False)
        f, bwd = cm.pass_times(cm.layer_parts(spec.model, spec.cluster, spec.training, cfg))
        return f + bwd
    except Exception:                 # the comparison is a convenience; the measurement stands without it
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    if (sys.argv[1:] if argv is None else argv) == ["--write-recipe-attention"]:
        out = recipe_attention_shapes()
        print(f"{len(out['shapes'])} attention calls of {len(out['rows'])} rows -> {RECIPE_ATTN}")
        return 0
    ap.add_argument("--out", required=True, help="directory for the JSON files")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run of the script itself")
    ap.add_argument("--sustain-s", type=float, default=60.0, help="seconds of back-to-back GEMMs / layers")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--parts", default="gemm,sustained,attention,elementwise,layer")
    ap.add_argument("--gpu-type", default="H200", choices=sorted(CLUSTERS),
                    help="the shipped cluster (and so compute profile) to compare the layer with")
    ap.add_argument("--attn-shapes", default=None,
                    help="JSON of attention calls to time instead of the grid (--write-recipe-attention writes one)")
    a = ap.parse_args(argv)
    if a.attn_shapes:
        with open(a.attn_shapes) as fh:
            a.attn_shapes = [tuple(x) for x in json.load(fh)["shapes"]]
    import torch
    threads = torch.get_num_threads()
    if a.device == "cpu":
        torch.set_num_threads(1)          # a smoke run: one thread does not fight other processes for cores
    try:
        return _run(a, torch)
    finally:
        torch.set_num_threads(threads)


def _run(a, torch) -> int:
    os.makedirs(a.out, exist_ok=True)
    info = {"torch": torch.__version__, "device": a.device, "quick": a.quick, "created": time.strftime("%Y-%m-%d %H:%M"),
            **({"gpu": torch.cuda.get_device_name(0), **gpu_state()} if a.device == "cuda" else {})}
    with open(os.path.join(a.out, "info.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    parts = {"gemm": lambda: part_gemm(a.device, a.quick, a.repeats),
             "gemm_warm": lambda: part_gemm_warm(a.device, a.quick, a.repeats),
             "sustained": lambda: part_sustained(a.device, a.quick, a.sustain_s),
             "attention": lambda: part_attention(a.device, a.quick, a.repeats, a.attn_shapes),
             "elementwise": lambda: part_elementwise(a.device, a.quick, a.repeats),
             "layer": lambda: part_layer(a.device, a.quick, a.repeats, a.sustain_s)}
    status = 0
    for name in a.parts.split(","):
        t = time.perf_counter()
        try:
            res = parts[name]()
        except Exception as e:        # one part failing must not lose the others' data
            res, status = {"error": f"{type(e).__name__}: {e}"[:300]}, 1
        with open(os.path.join(a.out, f"{name}.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        print(f"{name}: {time.perf_counter() - t:.1f} s -> {os.path.join(a.out, name + '.json')}")
        if name == "layer" and isinstance(res, list):
            for r in res:
                pred = model_layer_s(r, a.gpu_type)
                cmp_ = f", planner {pred * 1e3:.2f} ms ({pred / r['sustained_s'] - 1:+.1%})" if pred else ""
                print(f"  {r['name']}: burst {r['burst_s'] * 1e3:.2f} ms, after {r['after_s']:.0f} s "
                      f"{r['sustained_s'] * 1e3:.2f} ms{cmp_}")
        elif name == "gemm" and isinstance(res, list):
            print("  " + "; ".join(f"{r['name']} {r['dtype']} {r['tflops']:.0f}" for r in res if "tflops" in r))
        elif name == "gemm_warm" and isinstance(res, list):
            for r in res:
                if "warm_tflops" in r:
                    print(f"  {r['name']} {r['dtype']}: burst {r['burst_tflops']:.0f}, warm {r['warm_tflops']:.0f} "
                          f"TFLOP/s ({r.get('sm_MHz')} MHz)")
        elif name == "attention" and isinstance(res, list):
            for r in res:
                if "fwd_bwd_tflops" in r:
                    print(f"  {r['name']} {r['backend']}: fwd {r['fwd_tflops']:.0f}, fwd+bwd {r['fwd_bwd_tflops']:.0f}"
                          " TFLOP/s")
        elif name == "sustained" and isinstance(res, dict):
            for k, r in res.items():
                if "first_tflops" in r:
                    print(f"  {k}: first {r['first_tflops']:.1f} TFLOP/s, last {r['last_tflops']:.1f} TFLOP/s")
    return status


if __name__ == "__main__":
    sys.exit(main())
