"""The slowest GPU of a synchronous job (`gpu.variability` in a cluster file; off unless named).

GPUs of one model run the same kernels at different speeds: the power and clock limits meet different silicon
(Sinha et al., SC22, arXiv 2208.11035: 8% average variation among GPUs of one SKU). A synchronous training step
waits for its slowest GPU at every collective (tensor-parallel all-reduces in every layer, the pipeline's hand-offs,
the data-parallel reduction), so a plan on W GPUs drawn from the cluster runs its GPU work at the expected slowest
of W: E[max of W draws] / E[one draw] of the cluster's per-GPU times. A compute profile already carries the slowest
of the GPUs it was measured on (ComputeModel.reference_gpus: one for a single-GPU layer profile, the runs' GPU count
for an iteration fit), so the factor charged is slowest(W) / slowest(reference).

What it leaves out: a GPU's speed is taken as fixed (per-GPU medians; run-to-run noise and fail-slow events are
other effects), every GPU does the same work, and the slowest GPU's delay is not hidden by pipeline slack.
docs/notes/gpu_variability.md has the data and what the validations say with it.
"""
from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field

from planner.errors import SpecError
from planner.io import read_text_file

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gpu_variability")
SHIPPED = {"longhorn-v100-sgemm": "longhorn-v100-sgemm.csv"}
"""Spreads a cluster file can name (planner/data/gpu_variability/README.md: source and derivation)."""
MIN_GPUS = 2


@dataclass(frozen=True)
class GPUVariability:
    """The per-GPU time of the same work, one value per GPU of a measured population (any scale: only ratios
    count), and where it came from."""

    times: tuple
    """Relative time per GPU (positive, finite; at least MIN_GPUS values)."""
    source: str
    """A shipped name (SHIPPED) or the CSV's path."""
    _sorted: tuple = field(default=(), init=False, repr=False, compare=False)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """slowest(n) by n: the search asks on every layer_parts call, and the sum is O(GPUs)."""

    def __post_init__(self):
        if len(self.times) < MIN_GPUS:
            raise ValueError(f"needs at least {MIN_GPUS} GPUs' times, got {len(self.times)}")
        if not all(math.isfinite(t) and t > 0 for t in self.times):
            raise ValueError("every time must be finite and positive")
        object.__setattr__(self, "_sorted", tuple(sorted(self.times)))

    def slowest(self, n: float) -> float:
        """E[the slowest of n GPUs drawn from the population] / E[one GPU]: 1 at n = 1."""
        n = float(n)
        if n not in self._memo:
            self._memo[n] = _slowest(self._sorted, n)
        return self._memo[n]

    @property
    def label(self) -> str:
        """How reports name it: the shipped name, or the CSV's file name."""
        return self.source if self.source in SHIPPED else os.path.basename(self.source)

    def factor(self, gpus: int, reference_gpus: float = 1.0) -> float:
        """GPU work on `gpus` GPUs relative to a profile measured on `reference_gpus` (the slowest of each)."""
        return self.slowest(gpus) / self.slowest(reference_gpus)


def _slowest(times: tuple, n: float) -> float:
    """Exact for draws with replacement: the k-th smallest of M values is the maximum of n draws with probability
    (k / M)^n - ((k - 1) / M)^n."""
    m = len(times)
    mean = math.fsum(times) / m
    if n <= 1:
        return 1.0
    e = math.fsum(t * ((k / m) ** n - ((k - 1) / m) ** n) for k, t in enumerate(times, start=1))
    return e / mean


def read_variability(ref, base: str, file: str | None, field: str) -> GPUVariability | None:
    """`gpu.variability` of a cluster file: "none" (or absent), a shipped name, or a CSV path (resolved against the
    cluster file) of one numeric column, one row per GPU, an optional header line."""
    if ref is None or ref == "none":
        return None
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError(file, field, f"must be 'none', a shipped spread ({', '.join(SHIPPED)}) or a CSV path")
    if ref in SHIPPED:
        path, source = os.path.join(DATA, SHIPPED[ref]), ref
    else:
        path = os.path.normpath(os.path.join(base, ref))
        source = path
        if not os.path.exists(path):
            raise SpecError(file, field, f"{ref!r} is neither a shipped spread ({', '.join(SHIPPED)}) nor a file "
                                         f"({path} not found)")
    # every input file's rules (a regular UTF-8 file of bounded size); a spreadsheet's byte-order mark is dropped
    text = read_text_file(path, file, field).lstrip("\ufeff")
    times = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for i, row in enumerate(reader):
            cells = [c.strip() for c in row if c.strip()]
            if not cells:
                continue
            if len(cells) != 1:
                raise SpecError(file, field, f"{path} line {i + 1}: expected one value per line (a GPU's "
                                             f"relative time), got {len(cells)}")
            try:
                v = float(cells[0])
            except ValueError:
                if i == 0 and not times:        # a header
                    continue
                raise SpecError(file, field, f"{path} line {i + 1}: {cells[0]!r} is not a number") from None
            if not (math.isfinite(v) and v > 0):
                raise SpecError(file, field, f"{path} line {i + 1}: {cells[0]} is not a positive finite time")
            times.append(v)
    except csv.Error as e:
        raise SpecError(file, field, f"{path} line {reader.line_num}: not valid CSV ({e})") from None
    if len(times) < MIN_GPUS:
        raise SpecError(file, field, f"{path} has {len(times)} GPU time(s); a spread needs at least {MIN_GPUS}")
    return GPUVariability(tuple(times), source)


def variability_flag(text: str) -> str:
    """argparse type of a --gpu-variability flag (the validation scripts): "none", a shipped name, or a CSV path read
    from the working directory (returned absolute, so a spec built elsewhere finds it); a bad one is refused here,
    exit 2 naming the flag, before any row runs."""
    import argparse
    if text == "none" or text in SHIPPED:
        return text
    path = os.path.abspath(text)
    try:
        read_variability(path, ".", None, "--gpu-variability")
    except SpecError as e:
        raise argparse.ArgumentTypeError(e.reason) from None
    return path
