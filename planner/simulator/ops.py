"""The op vocabulary of the simulator: op kinds, a schedule's per-device op lists, chunk placement.

Shared by orders.py (which builds the lists), engine.py (which times them), vblocks.py, deepspeed.py and
the outputs (plot.py, trace.py); it imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.config import V_SHAPES

F, B, W, R = 0, 1, 2, 3
KIND_NAMES = ("F", "B", "W", "R")


def dp_sync_name(zero: int) -> str:
    """The collectives of the data-parallel gradient sync, as outputs label it: ZeRO-0 all-reduces the gradients;
    the distributed optimizer (ZeRO-1, Megatron-Core's --use-distributed-optimizer; DeepSpeed's ZeRO-1 and -2)
    reduce-scatters them and all-gathers the updated parameters, as FSDP (ZeRO-3) does once per iteration with pp > 1
    (the costs price the pair as one all-reduce's bytes: labels only)."""
    return "all-reduce" if zero == 0 else "reduce-scatter + all-gather"


@dataclass(frozen=True)
class Schedule:
    name: str
    p: int                       # devices (pipeline ranks)
    v: int                       # chunks per device
    m: int                       # micro-batches
    split: bool                  # B/W split
    recompute: bool              # R ops present
    early_recompute: bool        # R does not wait for the gradient (Mario): it may fill bubbles
    kinds: tuple                 # per device: int8 array of op kinds
    mbs: tuple                   # per device: int32 array of micro-batch indices
    chunks: tuple                # per device: int8 array of chunk indices

    @property
    def stages(self) -> int:
        return self.p * self.v

    def stage_of(self) -> np.ndarray:
        """stage_of[d, c]: the virtual stage chunk c of device d runs."""
        return stage_table(self.name, self.p, self.v)

    def num_ops(self) -> int:
        return int(sum(len(k) for k in self.kinds))


def stage_table(name: str, p: int, v: int) -> np.ndarray:
    d = np.arange(p)[:, None]
    c = np.arange(v)[None, :]
    if name in V_SHAPES:
        return np.where(c == 0, d, 2 * p - 1 - d).astype(np.int64)
    return (c * p + d).astype(np.int64)
