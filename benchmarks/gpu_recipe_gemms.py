"""The GEMMs of every Hopper recipe row's layer, timed on a lent GPU: does the planner's GEMM curve, a function of
the FLOPs alone, price the recipes' own shapes (issues #8, #9: the too-fast bias of the H100 rows)?

The curve (costs.compute: eff = max_efficiency * f / (f + half_size)) was fitted on `planner profile compute` layer
samples (square-ish shapes, hidden 2048-12288). The recipes' GEMMs are other shapes; the H200 bias probe timed seven
of them and some ran 13-29% below the curve (docs/notes/gpu_h200.md, "One H100"). This script times every GEMM of
every row's layer: the four of costs.compute.layer_parts (QKV, attention projection, fc1, fc2; tp-sharded), each as
the forward (tokens x K -> N), the input gradient and the weight gradient, in bf16 (torch.matmul with Megatron's
layouts: y = x W^T, dx = dy W, dW = dy^T x) and, for fp8 rows, in fp8 (torch._scaled_mm e4m3 x e4m3 -> bf16, TN,
per-tensor scales: the cuBLASLt call Transformer Engine's tensor-wise recipes make, each operand transposed first
as TE does). Every shape is timed against a reference 8192^3 bf16 GEMM timed in the same thermal state (the
reference is re-timed every few shapes), so the comparison with the curve is a ratio that the clocks cancel from.

    python benchmarks/gpu_recipe_gemms.py --shapes            # writes benchmarks/data/recipe_gemm_shapes.json (CPU)
    python benchmarks/gpu_recipe_gemms.py --out OUT           # on the lent GPU: OUT/recipe_gemms.json
    python benchmarks/gpu_recipe_gemms.py --compare FILE      # per row: measured layer GEMM time against the curve
Smoke run:  python benchmarks/gpu_recipe_gemms.py --out /tmp/g --device cpu --quick
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]
SHAPES = os.path.join(HERE, "data", "recipe_gemm_shapes.json")
REF = (8192, 8192, 8192)


def row_gemms(row: dict) -> dict | None:
    """{"fwd": [(M, K, N) x 4], "fp8": bool, "gpu": type} of a row's layer as costs.compute.layer_parts counts it;
    None for rows off Hopper."""
    from published_recipes import build
    spec, cfg, _, _ = build(row)
    gpu = spec.cluster.gpu.type.upper()
    if "H100" not in gpu and "H200" not in gpu:
        return None
    m, tr = spec.model, spec.training
    tokens = tr.seq_length // getattr(cfg, "cp", 1) * cfg.micro_batch_size
    h, kv, f, t = m.hidden_size, m.kv_channels, m.ffn_hidden_size, cfg.tp
    f1 = f * (2 if m.gated_mlp else 1)
    fwd = [(tokens, h, (h + 2 * kv) // t), (tokens, h // t, h), (tokens, h, f1 // t), (tokens, f // t, h)]
    return {"fwd": fwd, "fp8": tr.precision == "fp8", "gpu": gpu}


def roles(mkn: tuple) -> list[tuple[str, tuple]]:
    """The forward and its two backward GEMMs, (role, (M, K, N)): dx = dy W (tokens x N -> K), dW = dy^T x
    (N x tokens -> K)."""
    M, K, N = mkn
    return [("fwd", (M, K, N)), ("dgrad", (M, N, K)), ("wgrad", (N, M, K))]


def write_shapes(path: str = SHAPES) -> dict:
    from published_recipes import DATA, load_rows
    out = {"rows": {}, "shapes": []}
    seen = set()
    for data in (DATA, os.path.join(HERE, "data", "published_recipes_fsdp.yaml")):
        _, rows = load_rows(data)
        for row in rows:
            g = row_gemms(row)
            if g is None:
                continue
            out["rows"][row["id"]] = g
            for mkn in g["fwd"]:
                for role, shape in roles(tuple(mkn)):
                    for dtype in (("bf16", "fp8") if g["fp8"] else ("bf16",)):
                        key = (role, *shape, dtype)
                        if key not in seen:
                            seen.add(key)
                            out["shapes"].append({"role": role, "m": shape[0], "k": shape[1], "n": shape[2],
                                                  "dtype": dtype})
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    return out


def _fn(role, m, k, n, dtype, dev):
    """A callable doing the GEMM as the framework lays it out (see the module docstring)."""
    import torch
    if dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device=dev).to(f8)
        b = torch.randn(n, k, device=dev).to(f8).t()          # column-major K x N: TN
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    if role == "fwd":          # y[M,N] = x[M,K] W^T, W stored [N, K]
        x, w = torch.randn(m, k, device=dev, dtype=dt), torch.randn(n, k, device=dev, dtype=dt)
        return lambda: torch.matmul(x, w.t())
    if role == "dgrad":        # dx[M,N'] = dy[M,K'] W[K',N'] (W stored [out, in] = [K', N'])
        dy, w = torch.randn(m, k, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
        return lambda: torch.matmul(dy, w)
    # wgrad: dW[M', N'] = dy^T x with dy stored [tokens, M'] and x [tokens, N'] (K' = tokens)
    dy, x = torch.randn(k, m, device=dev, dtype=dt), torch.randn(k, n, device=dev, dtype=dt)
    return lambda: torch.matmul(dy.t(), x)


def _time(fn, dev, repeats, warmup=5) -> float:
    from gpu_bias_probe import timed
    return statistics.median(timed(fn, dev, repeats, warmup))


def measure(dev: str, quick: bool, repeats: int, ref_every: int, heat_s: float) -> dict:
    import torch
    from gpu_bias_probe import gpu_state
    shapes = json.load(open(SHAPES))["shapes"]
    if quick:
        shapes = [dict(s, m=64, k=64, n=96) for s in shapes[:4]]
    ref_shape = (64, 64, 64) if quick else REF
    ref = _fn("fwd", *ref_shape, "bf16", dev)
    t_end = time.perf_counter() + heat_s               # into the power-limited state first
    while time.perf_counter() < t_end:
        ref()
        if dev == "cuda":
            torch.cuda.synchronize()
    out, ref_s = [], _time(ref, dev, repeats)
    for i, s in enumerate(shapes):
        if i and i % ref_every == 0:
            ref_s = _time(ref, dev, repeats)
        try:
            fn = _fn(s["role"], s["m"], s["k"], s["n"], s["dtype"], dev)
            t = _time(fn, dev, repeats)
            out.append({**s, "s": t, "ref_s": ref_s, "tflops": 2 * s["m"] * s["k"] * s["n"] / t / 1e12})
        except Exception as e:               # keep the others
            out.append({**s, "error": f"{type(e).__name__}: {e}"[:200]})
        del fn
    return {"ref": list(ref_shape), "gemms": out, "end_state": gpu_state() if dev == "cuda" else {}}


def compare(path: str) -> int:
    """Per row: the layer's GEMM time (forward + both gradients, the row's precision) as measured, scaled to the
    curve's clock by the reference GEMM, against the curve's."""
    from planner.costs.compute import load_profile
    d = json.load(open(path))
    shapes = json.load(open(SHAPES))["rows"]
    prof = load_profile(os.path.join(ROOT, "planner", "data", "h100_compute_profile.json"))
    peak, peak8 = 989e12, 1979e12
    ref_flops = 2.0 * REF[0] * REF[1] * REF[2]
    curve_ref = prof._gemm_time(ref_flops, peak)
    got = {(g["role"], g["m"], g["k"], g["n"], g["dtype"]): g for g in d["gemms"] if "s" in g}
    print(f"GPU: {d.get('gpu')}; reference {REF} bf16: curve {ref_flops / curve_ref / 1e12:.0f} TFLOP/s; each time "
          "scaled by curve_ref / measured_ref of its own moment")
    print(f"{'row':34s} {'prec':5s} {'measured ms':>11s} {'curve ms':>9s} {'curve/meas':>10s}  worst GEMM")
    ratios = []
    for rid, r in shapes.items():
        dtype = "fp8" if r["fp8"] else "bf16"
        meas = curve = 0.0
        worst = (1e9, "")
        for mkn in r["fwd"]:
            for role, (m, k, n) in roles(tuple(mkn)):
                g = got.get((role, m, k, n, dtype))
                if g is None:
                    break
                t = g["s"] * curve_ref / g["ref_s"]
                f = 2.0 * m * k * n
                c = prof.fp8_gemm_time(f, peak, peak8) if dtype == "fp8" else prof._gemm_time(f, peak)
                meas, curve = meas + t, curve + c
                worst = min(worst, (c / t, f"{role} {m}x{k}x{n} {c / t - 1:+.0%}"))
        if meas:
            ratios.append(curve / meas)
            print(f"{rid:34s} {dtype:5s} {meas * 1e3:11.2f} {curve * 1e3:9.2f} {curve / meas - 1:+10.1%}  {worst[1]}")
    if ratios:
        print(f"curve / measured over {len(ratios)} rows: median {statistics.median(ratios) - 1:+.1%}, "
              f"min {min(ratios) - 1:+.1%}, max {max(ratios) - 1:+.1%} (negative: the curve is too fast)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", action="store_true", help="write the shapes file from the recipe rows (CPU)")
    ap.add_argument("--compare", metavar="FILE")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--ref-every", type=int, default=8)
    ap.add_argument("--heat-s", type=float, default=2.0)
    a = ap.parse_args(argv)
    if a.shapes:
        s = write_shapes()
        print(f"{len(s['rows'])} rows, {len(s['shapes'])} GEMMs -> {SHAPES}")
        return 0
    if a.compare:
        return compare(a.compare)
    if not a.out:
        ap.error("one of --shapes, --compare FILE, --out DIR")
    import torch
    os.makedirs(a.out, exist_ok=True)
    t = time.perf_counter()
    res = {"torch": torch.__version__, "created": time.strftime("%Y-%m-%d %H:%M"),
           "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
           **measure(a.device, a.quick, a.repeats, a.ref_every, a.heat_s)}
    with open(os.path.join(a.out, "recipe_gemms.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{len(res['gemms'])} GEMMs in {time.perf_counter() - t:.1f} s -> {a.out}/recipe_gemms.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
