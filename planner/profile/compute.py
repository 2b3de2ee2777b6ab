"""Compute profiling and fitting.

`planner profile compute` runs one transformer layer (one tensor-parallel rank's share: heads/tp
attention heads, ffn/tp MLP columns) forward and backward with torch on the local device (CUDA when
present, else CPU) over a grid of shapes and writes a CSV. `planner fit compute` fits the
ComputeModel's parameters either to such a profile (layer level) or to measured training
iterations in vTrain's format (iteration level, through the planner's own latency model), and writes
a profile JSON that a cluster names with `profiles: {compute: path}`.
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError

PROFILE_COLUMNS = ("hidden", "heads", "seq", "mbs", "tp", "precision", "device", "forward_ms", "backward_ms")


@dataclass(frozen=True)
class LayerSample:
    hidden: int
    heads: int
    seq: int
    mbs: int
    tp: int
    precision: str
    device: str
    forward_ms: float
    backward_ms: float


def _dtype(precision: str):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[precision]


def build_layer(hidden: int, heads: int, tp: int, dtype, device):
    """A GPT block as one tensor-parallel rank holds it (Megatron: column/row-parallel linears)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.h, self.nh, self.d = hidden, heads // tp, hidden // heads
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden // tp)
            self.proj = nn.Linear(hidden // tp, hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden // tp)
            self.fc2 = nn.Linear(4 * hidden // tp, hidden)

        def forward(self, x):                      # x: [s, b, h]
            s, b, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(s, b * self.nh, 3 * self.d).chunk(3, dim=-1)
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))       # [b*nh, s, d]
            scores = torch.baddbmm(torch.empty(b * self.nh, s, s, dtype=x.dtype, device=x.device), q,
                                   k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(self.d))
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            probs = torch.nn.functional.dropout(torch.softmax(scores.masked_fill(mask, -1e4), dim=-1), 0.1)
            ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, self.nh * self.d)
            x = x + torch.nn.functional.dropout(self.proj(ctx), 0.1)
            y = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
            return x + torch.nn.functional.dropout(y, 0.1)

    return Block().to(device=device, dtype=dtype)


def measure_layer(hidden: int, heads: int, seq: int, mbs: int, tp: int = 1, precision: str = "fp32",
                  device: str | None = None, repeats: int = 3, warmup: int = 1, seed: int = 0) -> LayerSample:
    """Median forward and backward wall time of one layer on the local device (real torch execution)."""
    import torch
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    dtype = _dtype(precision)
    layer = build_layer(hidden, heads, tp, dtype, device)
    x = torch.randn(seq, mbs, hidden, dtype=dtype, device=device, requires_grad=True)

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    fw, bw = [], []
    for i in range(warmup + repeats):
        sync()
        t0 = time.perf_counter()
        y = layer(x)
        sync()
        t1 = time.perf_counter()
        y.backward(torch.ones_like(y))
        sync()
        t2 = time.perf_counter()
        if i >= warmup:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
        layer.zero_grad(set_to_none=True)
        x.grad = None
    return LayerSample(hidden, heads, seq, mbs, tp, precision, device,
                       1e3 * float(np.median(fw)), 1e3 * float(np.median(bw)))


def profile_grid(hiddens, heads, seqs, mbss, tps, precision="fp32", device=None, repeats=3, head_dim=None,
                 skipped=None):
    """Every valid shape of the grid. head_dim: heads = hidden / head_dim for each hidden (instead of `heads`).
    A shape that runs out of device memory is skipped (and appended to `skipped`), not fatal."""
    import torch
    out = []
    for h, s, b, t in itertools.product(hiddens, seqs, mbss, tps):
        for a in ([h // head_dim] if head_dim else heads):
            if a < 1 or h % a or a % t or h % t:
                continue
            try:
                out.append(measure_layer(h, a, s, b, t, precision, device, repeats))
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                if skipped is not None:
                    skipped.append((h, a, s, b, t))
    return out


def write_profile_csv(path: str, samples: list[LayerSample]) -> None:
    from planner.io import atomic_write_text
    lines = [",".join(PROFILE_COLUMNS)]
    for s in samples:
        lines.append(",".join(str(getattr(s, c)) if not isinstance(getattr(s, c), float) else f"{getattr(s, c):.6g}"
                              for c in PROFILE_COLUMNS))
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_profile_csv(path: str) -> list[LayerSample]:
    if not os.path.exists(path):
        raise SpecError(path, None, "does not exist")
    with open(path, newline="") as fh:
        r = csv.DictReader(fh)
        missing = [c for c in PROFILE_COLUMNS if c not in (r.fieldnames or [])]
        if missing:
            raise SpecError(path, missing[0], "column missing (a `planner profile compute` CSV expected)")
        out = []
        for i, row in enumerate(r, start=2):
            try:
                out.append(LayerSample(int(row["hidden"]), int(row["heads"]), int(row["seq"]), int(row["mbs"]),
                                       int(row["tp"]), row["precision"], row["device"], float(row["forward_ms"]),
                                       float(row["backward_ms"])))
            except ValueError:
                raise SpecError(path, f"line {i}", "has a non-numeric value") from None
    if not out:
        raise SpecError(path, None, "has no samples")
    return out


# --- layer-level fit -----------------------------------------------------------------------------

LAYER_FIT = ("max_efficiency", "half_size", "attn_efficiency", "hbm_GBps", "layer_overhead_s")
# any device (a CPU as well as a GPU), so wider than the A100 iteration-fit bounds
LAYER_BOUNDS = {"max_efficiency": (0.01, 1.0), "half_size": (1e3, 1e12), "attn_efficiency": (0.01, 2.0),
                "hbm_GBps": (0.5, 10000.0), "layer_overhead_s": (0.0, 0.1), "backward_ratio": (1.0, 4.0)}


def _layer_pred(m, sample: LayerSample, peak_flops: float):
    """(forward s, backward s) the ComputeModel gives one layer (no TP collectives: one rank alone)."""
    from planner.config import ParallelConfig
    from planner.spec.cluster import GPUSpec
    from planner.spec.model import ModelSpec
    from planner.spec.plan import TrainingSpec
    model = ModelSpec(name="p", family="gpt", num_layers=1, hidden_size=sample.hidden, num_attention_heads=sample.heads,
                      num_kv_heads=sample.heads, ffn_hidden_size=4 * sample.hidden, vocab_size=50257,
                      tied_embeddings=True)
    tr = TrainingSpec(global_batch_size=sample.mbs, seq_length=sample.seq, precision=sample.precision)
    cfg = ParallelConfig(sample.tp, 1, 1, sample.mbs, 1)

    from types import SimpleNamespace
    from planner.spec.cluster import Link
    # a one-GPU stand-in: layer_parts reads the peak and (for its TP term, ignored here) the link
    cl = SimpleNamespace(gpu=GPUSpec(type="profiled", memory_GiB=0, peak_tflops={sample.precision: peak_flops / 1e12}),
                         intra=Link(bandwidth_GBps=1.0, latency_us=0.0))
    parts = m.layer_parts(model, cl, tr, cfg)    # its tp_comm is not used: profiling runs one rank alone
    return m.pass_times(parts)


def fit_layer_profile(samples: list[LayerSample], peak_flops: float, base=None, names=LAYER_FIT):
    """Least squares on log(pred/measured) of forward and backward times; returns (model, rel. errors)."""
    from scipy.optimize import least_squares
    from planner.costs.compute import ComputeModel
    from planner.profile.validate import LOG_PARAMS, _pack, _unpack
    FIT_BOUNDS = LAYER_BOUNDS
    base = base or ComputeModel(layer_overhead_s=1e-5)
    names = list(names)
    lo = [math.log(FIT_BOUNDS[n][0]) if n in LOG_PARAMS else FIT_BOUNDS[n][0] for n in names]
    hi = [math.log(FIT_BOUNDS[n][1]) if n in LOG_PARAMS else FIT_BOUNDS[n][1] for n in names]
    meas = np.array([[s.forward_ms * 1e-3, s.backward_ms * 1e-3] for s in samples])

    def resid(x):
        m = _unpack(base, names, x)
        pred = np.array([_layer_pred(m, s, peak_flops) for s in samples])
        return np.log(pred / meas).ravel()

    x0 = np.clip(_pack(base, names), lo, hi)
    scale = np.array([FIT_BOUNDS[n][1] - FIT_BOUNDS[n][0] if n not in LOG_PARAMS else 1.0 for n in names]) / 10
    res = least_squares(resid, x0, bounds=(lo, hi), x_scale=scale, diff_step=1e-3, max_nfev=300)
    m = _unpack(base, names, res.x)
    return m, np.exp(resid(res.x)) - 1.0


# --- CLI -----------------------------------------------------------------------------------------

def _ints(text: str) -> list[int]:
    try:
        v = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(None, text, "expected a comma-separated list of integers") from None
    if not v or min(v) < 1:
        raise SpecError(None, text, "expected positive integers")
    return v


def _run_profile(args) -> int:
    if args.head_dim is not None and args.head_dim < 1:
        raise SpecError(None, "--head-dim", "must be a positive integer")
    skipped = []
    samples = profile_grid(_ints(args.hidden), _ints(args.heads), _ints(args.seq), _ints(args.micro_batch),
                           _ints(args.tp), args.precision, args.device, args.repeats, args.head_dim, skipped)
    if not samples:
        raise SpecError(None, "--hidden/--heads/--tp", "no valid shape in the grid (heads must divide hidden, tp heads)"
                        + (f"; {len(skipped)} ran out of device memory" if skipped else ""))
    write_profile_csv(args.output, samples)
    if args.json:
        print(json.dumps({"output": args.output, "samples": len(samples), "device": samples[0].device,
                          "skipped_out_of_memory": len(skipped)}))
    else:
        import sys
        print(f"wrote {len(samples)} layer samples ({samples[0].device}) to {args.output}"
              + (f"; {len(skipped)} shapes ran out of device memory and were skipped" if skipped else ""),
              file=sys.stderr)
    return 0


def register_profile(subparsers):
    p = subparsers.add_parser("compute", help="time one transformer layer forward/backward on this device")
    p.add_argument("-o", "--output", default="compute_profile.csv")
    p.add_argument("--hidden", default="256,512,1024")
    p.add_argument("--heads", default="8")
    p.add_argument("--head-dim", type=int, default=None,
                   help="heads = hidden / HEAD_DIM for each hidden size (e.g. 128), instead of --heads")
    p.add_argument("--seq", default="256,512")
    p.add_argument("--micro-batch", default="1,2")
    p.add_argument("--tp", default="1,2")
    p.add_argument("--precision", default=None, choices=("fp32", "bf16", "fp16"),
                   help="default: fp16 on CUDA, fp32 on CPU")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--json", action="store_true")

    def run(args):
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        if args.precision is None:
            import torch
            args.precision = "fp16" if (args.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda") else "fp32"
        return _run_profile(args)
    p.set_defaults(func=run)
    return p


def _run_fit(args) -> int:
    import sys
    from planner.costs.comm import CommModel, read_nccl_dir
    from planner.costs.compute import ComputeModel
    from planner.io import atomic_write_text
    from planner.spec import load_cluster
    tables = read_nccl_dir(args.nccl) if args.nccl else {}
    base = ComputeModel(comm=CommModel(grad_bytes=args.grad_bytes, allreduce_tables=tables))
    out = {"comm": {**base.comm.to_dict()}}
    if args.nccl:
        out["comm"]["allreduce_tables"] = os.path.relpath(os.path.abspath(args.nccl),
                                                          os.path.dirname(os.path.abspath(args.output)))
    if args.measured:
        from planner.profile.validate import fit_compute, kfold_validate, read_vtrain_csv
        if not args.cluster:
            raise SpecError(None, "--cluster", "is required with --measured")
        cluster = load_cluster(args.cluster)
        rows = read_vtrain_csv(args.measured)
        engine = {"pipeline_engine": args.pipeline_engine}
        m, res = fit_compute(rows, cluster, base, defaults=engine)
        fit = {"kind": "iteration", "source": os.path.basename(args.measured), "rows": len(rows),
               "in_sample_rms_log_error": float(np.sqrt(np.mean(res.fun ** 2)))}
        if args.kfold > 1:
            errs, _ = kfold_validate(rows, cluster, base, k=args.kfold, defaults=engine)
            fit["kfold"] = args.kfold
            fit["cv_mape_pct"] = float(np.mean(np.abs(errs)))
            fit["cv_max_abs_pct_error"] = float(np.max(np.abs(errs)))
    elif args.profile:
        samples = read_profile_csv(args.profile)
        peak = args.peak_tflops * 1e12 if args.peak_tflops else None
        if peak is None:
            if not args.cluster:
                raise SpecError(None, "--peak-tflops", "give the device's peak, or --cluster to read it")
            peak = load_cluster(args.cluster).gpu.peak_flops(samples[0].precision)
        m, rel = fit_layer_profile(samples, peak, base)
        fit = {"kind": "layer", "source": os.path.basename(args.profile), "samples": len(samples),
               "peak_tflops": peak / 1e12, "mape_pct": float(100 * np.mean(np.abs(rel))),
               "max_abs_pct_error": float(100 * np.max(np.abs(rel)))}
    else:
        raise SpecError(None, "--measured/--profile", "give measured iterations or a layer profile to fit")
    out["compute"] = m.params()
    out["fit"] = fit
    atomic_write_text(args.output, json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2) if args.json else f"wrote {args.output}: {fit}", file=sys.stdout if args.json else sys.stderr)
    return 0


def register_fit(subparsers):
    p = subparsers.add_parser("compute", help="fit the compute model to a layer profile or measured iterations")
    p.add_argument("--measured", help="iteration times in vTrain's CSV format (fits through the latency model)")
    p.add_argument("--profile", help="a `planner profile compute` CSV (layer-level fit)")
    p.add_argument("--cluster", help="cluster YAML the measurements ran on")
    p.add_argument("--nccl", help="directory of nccl-tests all-reduce tables (allreduce_<N>gpu.txt)")
    p.add_argument("--grad-bytes", type=int, default=2, help="bytes per gradient in the DP all-reduce (fp16: 2)")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--kfold", type=int, default=0, help="also cross-validate with k folds")
    p.add_argument("--pipeline-engine", choices=("deepspeed", "megatron"), default="deepspeed",
                   help="the engine that ran --measured (default deepspeed, as vTrain's Megatron-DeepSpeed runs)")
    p.add_argument("-o", "--output", default="compute_profile.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run_fit)
    return p
