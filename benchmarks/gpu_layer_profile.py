"""Per-kernel times of one Llama layer's forward + backward on a lent GPU, with the clocks held where a long run holds
them (power cap), for comparing with the compute model's per-op parts (costs.compute.layer_parts).

The layer is gpu_bias_probe's (_layer_step: RMSNorm, fused QKV, causal SDPA, SwiGLU; bf16, tp 1). After `--warm-s` of
back-to-back steps, torch.profiler records `--steps` steps; each CUDA kernel's time is written with the op that
launched it and that op's input shapes. One file per SDPA back end (flash, cuDNN). With `--graphs`, instead: the
layer's wall per step eager and replayed from one CUDA graph (layer_graphed.json; benchmarks/sustained_factor.py).

Run on a lent GPU:  python benchmarks/gpu_layer_profile.py --out benchmarks/data/h200/layer_profile
                    python benchmarks/gpu_layer_profile.py --out benchmarks/data/h200/layer_graphed --graphs --warm-s 5
Smoke run:          python benchmarks/gpu_layer_profile.py --out /tmp/lp --device cpu --quick
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gpu_bias_probe import _layer_step, _sync, gpu_state

CASES = [("llama2-7b-s4096-mbs1", 1, 4096, 4096, 32, 11008), ("llama3-8b-s8192-mbs2", 2, 8192, 4096, 32, 14336)]


def profile_case(case, dev, backend, warm_s, steps):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile
    name, b, s, h, heads, f = case
    dtype = torch.float32 if dev == "cpu" else torch.bfloat16
    p = {k: (torch.randn(*shape, device=dev, dtype=dtype) * 0.02).requires_grad_(True)
         for k, shape in (("wqkv", (h, 3 * h)), ("wo", (h, h)), ("w13", (h, 2 * f)), ("w2", (f, h)))}
    x = torch.randn(b, s, h, device=dev, dtype=dtype, requires_grad=True)
    step = functools.partial(_layer_step, x, p, heads)
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    with sdpa_kernel([be]):
        t_end = time.perf_counter() + warm_s
        n = 0
        while time.perf_counter() < t_end or n < 3:
            step()
            n += 1
        _sync(dev)
        t = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(dev)
        wall = (time.perf_counter() - t) / steps
        state = gpu_state() if dev == "cuda" else {}
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
        with profile(activities=acts, record_shapes=True) as prof:
            for _ in range(steps):
                step()
            _sync(dev)
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        dt = getattr(e, "device_time_total", None)
        if dt is None:
            dt = getattr(e, "cuda_time_total", 0)
        self_dt = getattr(e, "self_device_time_total", None)
        if self_dt is None:
            self_dt = getattr(e, "self_cuda_time_total", 0)
        if dev == "cuda" and self_dt <= 0:
            continue
        rows.append({"op": e.key, "count": e.count, "shapes": str(e.input_shapes)[:300],
                     "self_device_us": self_dt, "device_us": dt, "cpu_us": e.self_cpu_time_total})
    rows.sort(key=lambda r: -r["self_device_us"])
    return {"case": name, "b": b, "seq": s, "hidden": h, "heads": heads, "ffn": f, "backend": backend,
            "steps": steps, "warm_s": warm_s, "wall_step_s": wall, **state, "ops": rows}


def graphed_vs_eager(case, backend, warm_s, steps):
    """Wall per step of the layer eager and replayed from one CUDA graph (PyTorch's whole-network capture: no host
    launches), after `warm_s` of eager steps; the difference is the host's share of the eager step."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    name, b, s, h, heads, f = case
    dev, dtype = "cuda", torch.bfloat16
    p = {k: (torch.randn(*shape, device=dev, dtype=dtype) * 0.02).requires_grad_(True)
         for k, shape in (("wqkv", (h, 3 * h)), ("wo", (h, h)), ("w13", (h, 2 * f)), ("w2", (f, h)))}
    x = torch.randn(b, s, h, device=dev, dtype=dtype, requires_grad=True)
    step = functools.partial(_layer_step, x, p, heads)
    be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def wall(fn, n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n

    with sdpa_kernel([be]):
        t_end = time.perf_counter() + warm_s
        while time.perf_counter() < t_end:
            step()
        eager = wall(step, steps)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                for t in (*p.values(), x):
                    t.grad = None
                step()
        torch.cuda.current_stream().wait_stream(side)
        for t in (*p.values(), x):
            t.grad = None
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        graphed = wall(g.replay, steps)
        eager_again = wall(step, steps)
    return {"case": name, "backend": backend, "eager_s": eager, "graphed_s": graphed, "eager_again_s": eager_again,
            "steps": steps, **gpu_state()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--warm-s", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--graphs", action="store_true", help="only the eager vs CUDA-graph comparison (GPU)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.graphs:
        res, status = [], 0
        for backend in ("cudnn", "flash"):
            for case in CASES:
                try:
                    r = graphed_vs_eager(case, backend, a.warm_s, max(a.steps, 20))
                    print(f"{backend} {r['case']}: eager {r['eager_s'] * 1e3:.2f} ms, graphed {r['graphed_s'] * 1e3:.2f} "
                          f"ms, eager again {r['eager_again_s'] * 1e3:.2f} ms ({r.get('sm_MHz')} MHz)")
                except Exception as e:
                    r, status = {"case": case[0], "backend": backend, "error": f"{type(e).__name__}: {e}"[:300]}, 1
                    print(r)
                res.append(r)
        with open(os.path.join(a.out, "layer_graphed.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        return status
    cases = [("tiny", 1, 64, 32, 2, 96)] if a.quick else CASES
    backends = ["math"] if a.device == "cpu" else ["flash", "cudnn"]
    status = 0
    for backend in backends:
        res = []
        for case in cases:
            try:
                r = profile_case(case, a.device, backend, a.warm_s, a.steps)
                print(f"{backend} {r['case']}: {r['wall_step_s'] * 1e3:.2f} ms/step (sm {r.get('sm_MHz')} MHz, "
                      f"{r.get('power_W')} W)")
                for o in r["ops"][:12]:
                    print(f"   {o['self_device_us'] / a.steps / 1e3:8.3f} ms  x{o['count'] // a.steps:<3} {o['op'][:60]}"
                          f"  {o['shapes'][:80]}")
            except Exception as e:      # one case failing must not lose the others
                r, status = {"case": case[0], "backend": backend, "error": f"{type(e).__name__}: {e}"[:300]}, 1
                print(r)
            res.append(r)
        with open(os.path.join(a.out, f"layer_profile_{backend}.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
