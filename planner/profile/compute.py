"""Compute profiling: layer samples and their CSV.

`planner profile compute` runs one transformer layer (one tensor-parallel rank's share: heads/tp
attention heads, ffn/tp MLP columns) forward and backward with torch on the local device (CUDA when
present, else CPU) over a grid of shapes and writes a CSV. `planner fit compute` fits the ComputeModel
to such a profile (planner.costs.compute_fit.LayerTimeFit) or to measured iterations (IterationTimeFit).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError
from planner.io import csv_number, read_csv_rows

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
    for h, a, s, b, t in grid_shapes(hiddens, heads, seqs, mbss, tps, head_dim):
        try:
            out.append(measure_layer(h, a, s, b, t, precision, device, repeats))
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if skipped is not None:
                skipped.append((h, a, s, b, t))
    return out


def grid_shapes(hiddens, heads, seqs, mbss, tps, head_dim=None) -> list[tuple[int, int, int, int, int]]:
    """The valid (hidden, heads, seq, mbs, tp) shapes of the grid: heads divide hidden, tp divides heads."""
    out = []
    for h, s, b, t in itertools.product(hiddens, seqs, mbss, tps):
        for a in ([h // head_dim] if head_dim else heads):
            if a < 1 or h % a or a % t or h % t:
                continue
            out.append((h, a, s, b, t))
    return out


def write_profile_csv(path: str, samples: list[LayerSample]) -> None:
    from planner.io import atomic_write_text
    lines = [",".join(PROFILE_COLUMNS)]
    for s in samples:
        lines.append(",".join(str(getattr(s, c)) if not isinstance(getattr(s, c), float) else f"{getattr(s, c):.6g}"
                              for c in PROFILE_COLUMNS))
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_profile_csv(path: str) -> list[LayerSample]:
    head, rows = read_csv_rows(path)
    missing = [c for c in PROFILE_COLUMNS if c not in head]
    if missing:
        raise SpecError(path, missing[0], "column missing (a `planner profile compute` CSV expected)")
    out = []
    for i, row in enumerate(rows, start=2):
        ints = [csv_number(row.get(c), path, i, c, int) for c in ("hidden", "heads", "seq", "mbs", "tp")]
        times = [csv_number(row.get(c), path, i, c) for c in ("forward_ms", "backward_ms")]
        if min(ints) <= 0 or min(times) <= 0:
            raise SpecError(path, f"line {i}", "sizes and times must be positive")
        out.append(LayerSample(*ints, row.get("precision", ""), row.get("device", ""), *times))
    if not out:
        raise SpecError(path, None, "has no samples")
    return out
